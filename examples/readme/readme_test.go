// Package readme checks that every Go block of the README and of the
// detailed documents beside the code compiles, so that a change that breaks
// one fails the tests.
package readme

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs are the markdown documents whose Go blocks are checked, relative to
// the repository's root.
var docs = []string{
	"README.md",
	"mscheduler/README.md",
	"worker/README.md",
	"examples/bench/README.md",
}

// prelude declares what the documents' snippets take as given: a context, a
// client and a collection, the types and functions they name without
// defining. Each snippet becomes the body of a function of its own, so its
// variables must all be used, as in a program.
const prelude = `package gen

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

var (
	ctx      = context.Background()
	client   *mongo.Client
	coll     *mongo.Collection
	db       *mongo.Database
	producer *mscheduler.Producer[Email]
	firstRun time.Time
)

type Email struct{ To string }
type Sync struct{}
type Report struct{ Month string }

func send(ctx context.Context, to string) (string, error)                          { return to, nil }
func syncSince(ctx context.Context, t time.Time) (int, error)                      { return 0, nil }
func sendEmail(ctx context.Context, t *mscheduler.Task[Email]) (string, error)    { return "", nil }
func buildReport(ctx context.Context, t *mscheduler.Task[Report]) (string, error) { return "", nil }

// Every import is used, whichever snippets use it.
var (
	_ = errors.New
	_ = fmt.Sprint
	_ = log.Print
	_ = os.Exit
	_ = bson.D{}
	_ = mschedulertest.Collection
	_ = worker.New
	_ = dashboard.New
	_ = http.Handle
	_ testing.TB
)
`

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestReadmeGoBlocksCompile type-checks every Go block of the documents:
// top level functions (func Name...) stay at the top level, import lines are
// dropped (the prelude imports what the documents use), and the rest of each
// block is the body of a function.
func TestReadmeGoBlocksCompile(t *testing.T) {
	var src strings.Builder
	src.WriteString(prelude)
	var where []string // the document and first line of each block, for messages
	n := 0
	for _, doc := range docs {
		text, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(doc)))
		if err != nil {
			t.Fatal(err)
		}
		blocks := goBlock.FindAllStringSubmatch(string(text), -1)
		t.Logf("%s: %d Go blocks", doc, len(blocks))
		for i, b := range blocks {
			if strings.Contains(b[1], "mschedulerotel.") {
				continue // that module's own test compiles it: this module does not require OpenTelemetry
			}
			n++
			top, body := split(b[1])
			fmt.Fprintf(&src, "\n// %s block %d\n%s\nfunc block%d() {\n%s}\n", doc, i+1, top, n, body)
			where = append(where, fmt.Sprintf("block%d, %s block %d: %s", n, doc, i+1, firstLine(b[1])))
		}
	}
	if n < 5 {
		t.Fatalf("found %d Go blocks in %s", n, strings.Join(docs, ", "))
	}
	dir, err := os.MkdirTemp(".", "gen-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "gen.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "vet", "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("Go blocks of the documents do not compile:\n%s\nblocks:\n  %s\ngenerated:\n%s", out, strings.Join(where, "\n  "), numbered(src.String()))
	}
}

// split separates a block's top-level functions from its statements, and
// drops its import lines.
func split(block string) (top, body string) {
	var t, b strings.Builder
	inFunc := false
	for _, line := range strings.SplitAfter(block, "\n") {
		switch {
		case strings.HasPrefix(line, "import "):
		case inFunc:
			t.WriteString(line)
			inFunc = !strings.HasPrefix(line, "}")
		case strings.HasPrefix(line, "func ") && !strings.HasPrefix(line, "func("):
			t.WriteString(line)
			inFunc = !strings.HasSuffix(strings.TrimSpace(line), "}")
		default:
			b.WriteString(line)
		}
	}
	return t.String(), b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func numbered(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = fmt.Sprintf("%4d  %s", i+1, lines[i])
	}
	return strings.Join(lines, "\n")
}
