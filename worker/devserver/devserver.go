// Package devserver starts the development MongoDB server for tests and examples, from a
// checkout of the repository.
//
// The server is testdata/devserver: FerretDB v1.24 with SQLite storage behind a front that
// forwards one command at a time, so single-document writes are atomic as on MongoDB (bare
// FerretDB 1.24 is not), and that emulates change streams (Options.NoChangeStreams turns them
// off). It lives in a module of its own so that the library never depends on
// FerretDB; Start builds it with the go command on first use (a minute or two, and the FerretDB
// modules come from the Go module proxy) and caches the binary per source version.
//
// Start needs a checkout of the repository and a go command. To test against a real MongoDB
// server instead, point MONGODB_URI at it; callers decide which one to use.
package devserver

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	modulePath  = "github.com/mscheduler/mscheduler"
	sourceDir   = "testdata/devserver" // relative to the repository root, slash-separated
	readyPrefix = "devserver listening on "

	// stopTimeout is how long Stop waits after SIGTERM before it kills the server.
	stopTimeout = 10 * time.Second

	// stderrTailSize is how much of the server's stderr an error message quotes.
	stderrTailSize = 4 << 10
)

// Options configures Start.
type Options struct {
	Dir    string    // data directory; empty means a new temporary directory removed by Stop
	Addr   string    // listen address; empty means "127.0.0.1:0"
	Stderr io.Writer // where the server's stderr goes; nil discards
	// PostgreSQLURL stores the data in PostgreSQL (postgres://...) instead of SQLite files in
	// Dir: slower to set up, but it pushes equality filters down and keeps real indexes, so
	// it stays fast with thousands of documents. Defaults to $MSCHEDULER_DEV_POSTGRESQL_URL;
	// empty means SQLite.
	PostgreSQLURL string
	// NoChangeStreams starts the server without its emulated change streams: $changeStream then
	// fails as on a standalone MongoDB server, so that the polling path can be tested. Defaults
	// to true when $MSCHEDULER_DEV_NO_CHANGE_STREAMS is set to a non-empty value other than "0".
	NoChangeStreams bool
	// Progress, when set, hears what Start is doing while it makes the caller wait, one
	// sentence per call: when it builds the server (the first Start for a version of its
	// sources takes a minute or two), and when the build is done.
	Progress func(msg string)
}

// EnvPostgreSQLURL names the environment variable that gives Options.PostgreSQLURL its
// default, so that tests, examples and the benchmark run on PostgreSQL unchanged.
const EnvPostgreSQLURL = "MSCHEDULER_DEV_POSTGRESQL_URL"

// EnvNoChangeStreams names the environment variable that gives Options.NoChangeStreams its
// default, so that a whole test run (CI runs both) can take the path of servers without change
// streams.
const EnvNoChangeStreams = "MSCHEDULER_DEV_NO_CHANGE_STREAMS"

// Server is a running development server.
type Server struct {
	cmd       *exec.Cmd
	uri       string
	addr      string
	dir       string
	removeDir bool // Dir was made by Start, so Stop removes it

	postgreSQLURL string // empty: SQLite in dir
	noStreams     bool

	stderr *tailBuffer

	exited  chan struct{} // closed once the process has exited and its output is drained
	waitErr error         // cmd.Wait's result, valid after exited is closed

	mu      sync.Mutex
	killed  bool // Kill was called: the exit is expected
	stopped bool
	stopErr error
}

// Start builds the development server if needed, starts it, and returns once it accepts
// MongoDB clients. ctx bounds the build and the start-up only: the server runs until Stop or
// Kill.
func Start(ctx context.Context, opts Options) (*Server, error) {
	root, err := findRepoRoot()
	if err != nil {
		return nil, err
	}

	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	bin, err := buildBinary(ctx, filepath.Join(root, filepath.FromSlash(sourceDir)), progress)
	if err != nil {
		return nil, err
	}

	s := &Server{
		addr: opts.Addr, dir: opts.Dir,
		postgreSQLURL: cmp.Or(opts.PostgreSQLURL, os.Getenv(EnvPostgreSQLURL)),
		noStreams:     opts.NoChangeStreams || envSet(EnvNoChangeStreams),
	}
	if s.addr == "" {
		s.addr = "127.0.0.1:0"
	}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "mscheduler-devserver-data-"); err != nil {
			return nil, fmt.Errorf("devserver: data directory: %w", err)
		}
		s.removeDir = true
	}

	if err := s.start(ctx, bin, opts.Stderr); err != nil {
		if s.removeDir {
			_ = os.RemoveAll(s.dir)
		}
		return nil, err
	}

	return s, nil
}

// URI returns the server's connection string, mongodb://127.0.0.1:PORT/.
func (s *Server) URI() string { return s.uri }

// Addr returns the address the server listens on, 127.0.0.1:PORT. Passing it as Options.Addr
// restarts a server on the same port.
func (s *Server) Addr() string { return s.addr }

// Storage says where the data is kept: "sqlite" or "postgresql".
func (s *Server) Storage() string {
	if s.postgreSQLURL != "" {
		return "postgresql"
	}
	return "sqlite"
}

// ChangeStreams says whether the server serves change streams.
func (s *Server) ChangeStreams() bool { return !s.noStreams }

// envSet says whether an on/off environment variable is on: set, and neither empty nor "0".
func envSet(name string) bool {
	v := os.Getenv(name)
	return v != "" && v != "0"
}

// Dir returns the data directory.
func (s *Server) Dir() string { return s.dir }

// start runs the binary and waits for its ready line.
func (s *Server) start(ctx context.Context, bin string, stderr io.Writer) error {
	if stderr == nil {
		stderr = io.Discard
	}

	ready := newReadyWriter()
	s.stderr = &tailBuffer{max: stderrTailSize}

	// Not exec.CommandContext: the server must outlive ctx, which bounds the start only.
	args := []string{"-listen", s.addr, "-dir", s.dir}
	if s.postgreSQLURL != "" {
		args = append(args, "-handler", "postgresql", "-postgresql-url", s.postgreSQLURL)
	}
	if s.noStreams {
		args = append(args, "-no-change-streams")
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout = ready
	s.cmd.Stderr = io.MultiWriter(s.stderr, ignoreErrors{stderr})
	s.cmd.SysProcAttr = sysProcAttr()

	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("devserver: run %s: %w", bin, err)
	}

	s.exited = make(chan struct{})
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()

	select {
	case uri := <-ready.uri:
		return s.setURI(uri)

	case <-s.exited:
		return fmt.Errorf("devserver: exited before it was ready: %w%s", s.waitErr, s.stderrTail())

	case <-ctx.Done():
		_ = s.Kill()
		return fmt.Errorf("devserver: waiting for the server to be ready: %w%s", ctx.Err(), s.stderrTail())
	}
}

// setURI records the announced URI and the address in it, which has the real port when
// Options.Addr asked for port 0.
func (s *Server) setURI(uri string) error {
	u, err := url.Parse(uri)
	if err != nil || u.Host == "" {
		_ = s.Kill()
		return fmt.Errorf("devserver: bad address announced: %q", uri)
	}

	s.uri = uri
	s.addr = u.Host

	return nil
}

// Stop stops the server with SIGTERM, waits for it (killing it if it takes longer than
// stopTimeout), and removes the data directory if Start made it. It reports an unexpected
// exit of the server. Further calls return the first call's result.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()

	if s.stopped {
		return s.stopErr
	}
	s.stopped = true

	err := s.terminate()
	if s.removeDir {
		if rmErr := os.RemoveAll(s.dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("devserver: remove data directory: %w", rmErr))
		}
	}
	s.stopErr = err

	return err
}

// terminate ends the process gracefully; s.mu is held.
func (s *Server) terminate() error {
	select {
	case <-s.exited:
		if s.killed {
			return nil
		}
		return s.exitError("exited before Stop")
	default:
	}

	graceful, err := terminateProcess(s.cmd.Process)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("devserver: stop: %w", err)
	}

	select {
	case <-s.exited:
		if !graceful {
			return nil
		}
		return s.exitError("failed while stopping")

	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("devserver: did not stop within %v of SIGTERM and was killed%s", stopTimeout, s.stderrTail())
	}
}

// exitError describes a non-zero exit; s.exited is closed.
func (s *Server) exitError(what string) error {
	if s.waitErr == nil {
		return nil
	}
	return fmt.Errorf("devserver: %s: %w%s", what, s.waitErr, s.stderrTail())
}

// Kill kills the server with SIGKILL and waits for it to exit, as a crash would. It keeps the
// data directory, so a new server started with the same Dir (and Addr) sees the data. Stop
// may still be called afterwards to remove a temporary directory; further calls do nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()

	select {
	case <-s.exited:
		return nil
	default:
	}

	s.killed = true
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("devserver: kill: %w", err)
	}
	<-s.exited

	return nil
}

func (s *Server) stderrTail() string {
	tail := strings.TrimSpace(s.stderr.String())
	if tail == "" {
		return ""
	}
	return "; stderr:\n" + tail
}

// findRepoRoot looks for the repository root above the working directory, then above this
// source file (which is inside the repository when the package is used from a checkout).
func findRepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}

	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			if isRepoRoot(dir) {
				return dir, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}

	return "", fmt.Errorf("devserver: no checkout of %s found above %q: the development server "+
		"is built from its testdata/devserver directory, so it needs a checkout of the repository; "+
		"set MONGODB_URI to use a real MongoDB server instead", modulePath, starts)
}

// isRepoRoot reports whether dir holds the root module's go.mod and the server's sources.
func isRepoRoot(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(sourceDir), "go.mod")); err != nil {
		return false
	}

	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}

	return moduleLine(data) == "module "+modulePath
}

// moduleLine returns the first line of a go.mod that is neither blank nor a comment.
func moduleLine(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "//") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	return ""
}

// buildMu makes concurrent Starts in one process build the binary once; across processes,
// an atomic rename makes a duplicate build harmless.
var buildMu sync.Mutex

// buildBinary returns the path of the server binary for the sources in src, building it
// if no binary for this exact source version is cached.
func buildBinary(ctx context.Context, src string, progress func(msg string)) (string, error) {
	hash, err := sourceHash(src)
	if err != nil {
		return "", err
	}

	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "mscheduler-devserver", hash)
	bin := filepath.Join(dir, "devserver"+exeSuffix())

	buildMu.Lock()
	defer buildMu.Unlock()

	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("devserver: binary cache: %w", err)
	}

	// Build into a private directory next to the final path, then rename, so that a process
	// never sees (or runs) a half-written binary.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("devserver: binary cache: %w", err)
	}
	defer os.RemoveAll(tmp)

	out := filepath.Join(tmp, "devserver"+exeSuffix())
	progress(fmt.Sprintf("building the development server (FerretDB) into %s: the first time for this version of it, which takes a minute or two...", dir))
	began := time.Now()
	if err := goBuild(ctx, src, out); err != nil {
		return "", err
	}
	progress(fmt.Sprintf("built the development server in %s", time.Since(began).Round(time.Second)))

	if err := os.Rename(out, bin); err != nil {
		return "", fmt.Errorf("devserver: binary cache: %w", err)
	}

	return bin, nil
}

// goBuild runs `go build` in src. The environment passes through (GOPROXY, GOFLAGS, caches),
// except that a go.work at the repository root must not capture the server's own module.
func goBuild(ctx context.Context, src, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")

	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("devserver: go build in %s: %w\n%s", src, err, bytes.TrimSpace(output))
	}

	return nil
}

// sourceHash identifies a version of the server's sources: go.mod, go.sum and the non-test
// .go files of src, and the platform and Go version that the binary would be built for.
func sourceHash(src string) (string, error) {
	entries, err := os.ReadDir(src)
	if err != nil {
		return "", fmt.Errorf("devserver: sources: %w", err)
	}

	var names []string
	for _, e := range entries {
		name := e.Name()
		isSource := strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
		if e.Type().IsRegular() && (name == "go.mod" || name == "go.sum" || isSource) {
			names = append(names, name)
		}
	}
	slices.Sort(names)

	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("devserver: sources: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}

	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func exeSuffix() string {
	if runtime.GOOS == "windows" {
		return ".exe"
	}
	return ""
}

// readyWriter receives the server's stdout and delivers the URI of its ready line.
type readyWriter struct {
	uri chan string // receives one URI

	mu    sync.Mutex
	line  []byte
	found bool
}

func newReadyWriter() *readyWriter {
	return &readyWriter{uri: make(chan string, 1)}
}

// maxLine bounds a partial stdout line kept in memory.
const maxLine = 4 << 10

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()

	if w.found {
		return len(p), nil
	}

	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}

		line := strings.TrimSpace(string(w.line[:i]))
		w.line = w.line[i+1:]

		if uri, ok := strings.CutPrefix(line, readyPrefix); ok {
			w.found = true
			w.line = nil
			w.uri <- uri
			break
		}
	}

	if len(w.line) > maxLine {
		w.line = w.line[len(w.line)-maxLine:]
	}

	return len(p), nil
}

// ignoreErrors reports every write as successful. A failing Options.Stderr must not stop the
// copying of the server's stderr: the pipe would fill up and the server block on its next log.
type ignoreErrors struct{ w io.Writer }

func (w ignoreErrors) Write(p []byte) (int, error) {
	_, _ = w.w.Write(p)
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int

	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = slices.Clone(b.buf[over:])
	}

	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return string(b.buf)
}
