package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker"
)

// Environment of a worker process: the test binary run again with
// envWorker set becomes one worker incarnation.
const (
	envWorker = "MSCHEDULER_SOAK_WORKER" // the worker id
	envURI    = "MSCHEDULER_SOAK_URI"
	envDB     = "MSCHEDULER_SOAK_DB"
	envColl   = "MSCHEDULER_SOAK_COLL"
	envLog    = "MSCHEDULER_SOAK_LOG"   // the handler log file
	envSkew   = "MSCHEDULER_SOAK_SKEW"  // a time.Duration added to the worker's clock
	envSweep  = "MSCHEDULER_SOAK_SWEEP" // the consumer's SweepInterval
	envCheck  = "MSCHEDULER_SOAK_CHECK" // the consumer's CheckInterval; unset: the library's default
	envCap    = "MSCHEDULER_SOAK_CAP"   // the consumer's Capacity; unset: workerCapacity
	envPoll   = "MSCHEDULER_SOAK_POLL"  // the consumer's PollInterval; unset: workerPollInterval
	envMaint  = "MSCHEDULER_SOAK_MAINT" // the consumer's MaintenanceInterval; unset: workerMaintenance
)

// Consumer settings of every worker process.
const (
	workerCapacity     = 6
	workerPollInterval = 100 * time.Millisecond
	workerRunsKept     = 200 // every run record is checked (the dev server ignores $slice anyway)
	workerShutdown     = 20 * time.Second
	// workerMaintenance is short: the history records of killed workers'
	// runs are written by the maintenance lease holder, and the soak waits
	// for them at the end.
	workerMaintenance   = time.Second
	workerStartAttempts = 5
)

// params are a task's parameters: what its handler does.
type params struct {
	Kind  string `bson:"kind"`
	DurMS int    `bson:"dur_ms"`
}

// Task kinds, which decide the handler's behaviour and the expected end.
const (
	kindQuick     = "quick"
	kindSlow      = "slow"
	kindRetry     = "retry" // fails its first attempt, succeeds on the local retry
	kindFail      = "fail"  // always fails
	kindConc      = "conc"  // concurrency 2
	kindDistinct  = "distinct"
	kindRecurring = "recurring"
)

// Outcomes a handler call logs on its end line.
const (
	logSucceeded = "succeeded"
	logFailed    = "failed"
	logCancelled = "cancelled"
)

// runWorkerProcess is the body of a worker process. It returns the exit
// code: 0 after a graceful stop (SIGTERM), 1 when it could not start.
func runWorkerProcess() int {
	id := os.Getenv(envWorker)
	// The parent holds our stdin open; when it dies, stdin closes and the
	// worker goes with it, without a graceful stop.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		fmt.Fprintln(os.Stderr, "soak worker: stdin closed; exiting")
		os.Exit(3)
	}()
	logFile, err := os.OpenFile(os.Getenv(envLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak worker:", err)
		return 1
	}
	shape, skew, err := readShape()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak worker:", err)
		return 1
	}
	// DEBUG: a failure's report shows when each worker swept.
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	handler := newHandler(logFile)
	// Run handles SIGTERM itself; this catches one that comes between two
	// attempts to start.
	stopped, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Run can be called once per worker; a start that fails (the server was
	// down for longer than the driver waits) is retried with a new Worker
	// under the same id: nothing was claimed yet.
	for attempt := 1; ; attempt++ {
		err := runWorkerOnce(stopped, id, skew, shape, logger, handler)
		if err == nil {
			return 0
		}
		logger.Error("soak worker: start failed", "attempt", attempt, "error", err)
		if attempt == workerStartAttempts {
			return 1
		}
		select {
		case <-stopped.Done():
			return 0
		case <-time.After(time.Second):
		}
	}
}

// readShape reads the consumer settings and the clock skew a worker
// process is given; an unset setting keeps its default.
func readShape() (shape consumerShape, skew time.Duration, err error) {
	shape = consumerShape{capacity: workerCapacity, poll: workerPollInterval, maintenance: workerMaintenance}
	if shape.sweep, err = time.ParseDuration(os.Getenv(envSweep)); err != nil {
		return shape, 0, err
	}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{envSkew, &skew}, {envCheck, &shape.check}, {envPoll, &shape.poll}, {envMaint, &shape.maintenance}} {
		if v := os.Getenv(d.env); v != "" {
			if *d.to, err = time.ParseDuration(v); err != nil {
				return shape, 0, fmt.Errorf("%s: %w", d.env, err)
			}
		}
	}
	if v := os.Getenv(envCap); v != "" {
		if shape.capacity, err = strconv.Atoi(v); err != nil {
			return shape, 0, fmt.Errorf("%s: %w", envCap, err)
		}
	}
	return shape, skew, nil
}

// consumerShape is the consumer settings a worker process is given.
type consumerShape struct {
	capacity                        int
	poll, sweep, check, maintenance time.Duration // check 0: the library's default
}

func runWorkerOnce(stopped context.Context, id string, skew time.Duration, shape consumerShape, logger *slog.Logger, handler mscheduler.Handler[params, string]) error {
	ctx, cancel := context.WithTimeout(stopped, time.Minute)
	defer cancel()
	w, err := worker.New(ctx, worker.Config{
		URI:             os.Getenv(envURI),
		Database:        os.Getenv(envDB),
		WorkerID:        id,
		Logger:          logger,
		ShutdownTimeout: workerShutdown,
	})
	if err != nil {
		return err
	}
	cfg := &mscheduler.ConsumerConfig{
		Capacity:            shape.capacity,
		PollInterval:        shape.poll,
		SweepInterval:       shape.sweep,
		RunsKept:            workerRunsKept,
		MaintenanceInterval: shape.maintenance,
		CheckInterval:       shape.check,
	}
	if skew != 0 {
		cfg.Clock = func() time.Time { return time.Now().Add(skew) }
	}
	if err := worker.Register(w, os.Getenv(envColl), handler, cfg); err != nil {
		_ = w.Close()
		return err
	}
	go func() {
		<-w.Ready()
		fmt.Println("ready", id) // the parent waits for this line
	}()
	return w.Run(stopped) // until SIGTERM
}

// newHandler returns the handler of every task. It logs each call's start
// and end to logFile, one write per line, so that a SIGKILL leaves whole
// lines only.
func newHandler(logFile *os.File) mscheduler.Handler[params, string] {
	logLine := func(format string, args ...any) {
		if _, err := logFile.Write([]byte(fmt.Sprintf(format, args...))); err != nil {
			fmt.Fprintln(os.Stderr, "soak worker: handler log:", err)
			os.Exit(4) // a run whose lines are lost would fail the checks for the wrong reason
		}
	}
	return func(ctx context.Context, task *mscheduler.Task[params]) (string, error) {
		run := task.Run
		var planned int64
		if !run.PlannedAt.IsZero() {
			planned = run.PlannedAt.UnixMilli()
		}
		logLine("start %s %s %s %d %d\n", task.Key, run.ID, run.WorkerID, planned, time.Now().UnixNano())
		end := func(outcome string) {
			logLine("end %s %s %s %s %d\n", task.Key, run.ID, run.WorkerID, outcome, time.Now().UnixNano())
		}
		select {
		case <-time.After(time.Duration(task.Params.DurMS) * time.Millisecond):
		case <-ctx.Done():
			end(logCancelled)
			return "", context.Cause(ctx)
		}
		switch {
		case task.Params.Kind == kindFail:
			end(logFailed)
			return "", errors.New("soak: this task always fails")
		case task.Params.Kind == kindRetry && run.Attempt == 1:
			end(logFailed)
			return "", errors.New("soak: first attempt fails")
		}
		end(logSucceeded)
		return "ok", nil
	}
}

// workerProc is one worker incarnation, as the parent sees it.
type workerProc struct {
	id      string
	slot    int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	logPath string // handler log
	errPath string // the worker's stderr (its JSON logs)

	ready  chan struct{} // closed when the worker said it is ready
	exited chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's, valid once exited is closed

	mu       sync.Mutex
	expected bool      // killed or terminated by the soak: its exit is no surprise
	killedAt time.Time // when the soak sent SIGKILL; zero if it never did
}

// workerEnv is what every worker process is told.
type workerEnv struct {
	exe   string // the test binary
	uri   string
	db    string
	coll  string
	dir   string // where handler logs and worker stderr go
	sweep time.Duration
	check time.Duration // 0: the library's default
	// capacity, poll and maintenance are the consumer's; 0:
	// workerCapacity, workerPollInterval and workerMaintenance.
	capacity          int
	poll, maintenance time.Duration
	// direct connects the workers to the server itself, as a user's
	// workers would, not through the proxy that splits their batches
	// statement by statement (see splitURI).
	direct bool
}

// startWorker starts worker incarnation id in slot.
func startWorker(env workerEnv, slot int, id string, skew time.Duration) (*workerProc, error) {
	p := &workerProc{
		id:      id,
		slot:    slot,
		logPath: filepath.Join(env.dir, "handler-"+id+".log"),
		errPath: filepath.Join(env.dir, "worker-"+id+".stderr"),
		ready:   make(chan struct{}),
		exited:  make(chan struct{}),
	}
	stderr, err := os.Create(p.errPath)
	if err != nil {
		return nil, err
	}
	defer stderr.Close() // the child has its own copy
	p.cmd = exec.Command(env.exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(),
		envWorker+"="+id, envURI+"="+env.uri, envDB+"="+env.db, envColl+"="+env.coll,
		envLog+"="+p.logPath, envSkew+"="+skew.String(), envSweep+"="+env.sweep.String())
	if env.check != 0 {
		p.cmd.Env = append(p.cmd.Env, envCheck+"="+env.check.String())
	}
	if env.capacity != 0 {
		p.cmd.Env = append(p.cmd.Env, envCap+"="+strconv.Itoa(env.capacity))
	}
	if env.poll != 0 {
		p.cmd.Env = append(p.cmd.Env, envPoll+"="+env.poll.String())
	}
	if env.maintenance != 0 {
		p.cmd.Env = append(p.cmd.Env, envMaint+"="+env.maintenance.String())
	}
	p.cmd.Stderr = stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready "+id {
				once.Do(func() { close(p.ready) })
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *workerProc) isReady() bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

func (p *workerProc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *workerProc) markExpected() {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
}

func (p *workerProc) unexpectedExit() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.expected && p.hasExited()
}

// kill SIGKILLs the process and waits for it.
func (p *workerProc) kill() {
	p.markExpected()
	p.mu.Lock()
	p.killedAt = time.Now()
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.exited
	_ = p.stdin.Close()
}

// terminate sends SIGTERM and waits up to timeout for a graceful exit; it
// kills the process past it. It returns the exit error, or a timeout error.
func (p *workerProc) terminate(timeout time.Duration) error {
	p.markExpected()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.exited:
		_ = p.stdin.Close()
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("worker %s did not stop within %s of SIGTERM and was killed", p.id, timeout)
	}
}

// stderrTail is the end of the worker's stderr, for failure messages.
func (p *workerProc) stderrTail() string {
	data, err := os.ReadFile(p.errPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// slotID is the worker id of incarnation inc in slot: distinct per
// incarnation, and saying which slot runs the skewed clock.
func slotID(slot, inc int, skewed bool) string {
	id := "s" + strconv.Itoa(slot) + "-i" + strconv.Itoa(inc)
	if skewed {
		id += "-skew"
	}
	return id
}

// workerPool is the four worker slots.
type workerPool struct {
	t     *testing.T
	env   workerEnv
	skews []time.Duration

	mu    sync.Mutex
	procs []*workerProc // current incarnation per slot
	all   []*workerProc // every incarnation started
	incs  []int
}

func newWorkerPool(t *testing.T, env workerEnv, skews []time.Duration) *workerPool {
	wp := &workerPool{t: t, env: env, skews: skews, procs: make([]*workerProc, len(skews)), incs: make([]int, len(skews))}
	t.Cleanup(wp.killAll)
	return wp
}

// start starts a new incarnation in slot.
func (wp *workerPool) start(slot int) *workerProc {
	wp.t.Helper()
	wp.mu.Lock()
	defer wp.mu.Unlock()
	id := slotID(slot, wp.incs[slot], wp.skews[slot] != 0)
	wp.incs[slot]++
	p, err := startWorker(wp.env, slot, id, wp.skews[slot])
	if err != nil {
		wp.t.Fatalf("start worker %s: %v", id, err)
	}
	wp.procs[slot] = p
	wp.all = append(wp.all, p)
	return p
}

func (wp *workerPool) current() []*workerProc {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	return append([]*workerProc(nil), wp.procs...)
}

func (wp *workerPool) incarnations() []*workerProc {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	return append([]*workerProc(nil), wp.all...)
}

// killAll kills every process still running: the cleanup of a failed run.
func (wp *workerPool) killAll() {
	for _, p := range wp.incarnations() {
		if !p.hasExited() {
			p.kill()
		}
	}
}
