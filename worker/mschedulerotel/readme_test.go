package mschedulerotel_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The root module's documentation test cannot compile the Go blocks that
// import this module, so this one does: every block of this README, and the
// blocks of the repository's README that name mschedulerotel.
const docsPrelude = `package gen

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/mschedulerotel"
)

type Email struct{ To string }

func sendEmail(ctx context.Context, t *mscheduler.Task[Email]) (string, error) { return t.Params.To, nil }

var (
	_ metric.MeterProvider
	_ trace.TracerProvider
	_ = mschedulerotel.W3C
)
`

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

func TestReadmeGoBlocksCompile(t *testing.T) {
	var src strings.Builder
	src.WriteString(docsPrelude)
	n := 0
	for _, doc := range []struct {
		path string
		all  bool
	}{{"README.md", true}, {filepath.Join("..", "..", "README.md"), false}} {
		text, err := os.ReadFile(doc.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range goBlock.FindAllStringSubmatch(string(text), -1) {
			if doc.all || strings.Contains(b[1], "mschedulerotel.") {
				n++
				fmt.Fprintf(&src, "\n// %s\n%s", doc.path, b[1])
			}
		}
	}
	if n < 2 {
		t.Fatalf("found %d Go blocks, want this README's and the repository README's", n)
	}
	dir, err := os.MkdirTemp(".", "gen-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "gen.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "vet", "./"+dir).CombinedOutput(); err != nil {
		t.Fatalf("Go blocks do not compile:\n%s\n%s", out, src.String())
	}
}
