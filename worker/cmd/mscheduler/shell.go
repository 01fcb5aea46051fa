package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// shellHandler runs a task by executing command with sh -c:
//   - stdin is the params as relaxed extended JSON ("null" when none);
//   - the environment is the worker's, less its secrets (MONGODB_URI,
//     MSCHEDULER_DASHBOARD_TOKEN), plus MSCHEDULER_KEY, MSCHEDULER_RUN_ID,
//     MSCHEDULER_ATTEMPT, MSCHEDULER_COLLECTION, and MSCHEDULER_PARAM_<name>
//     for each top-level string, number or boolean of document params
//     whose name is a shell name;
//   - stdout, trimmed, is the result: as JSON if it parses, else a string;
//   - a non-zero exit fails the attempt, with the end of stderr as the
//     error (the task's retries apply);
//   - the run's context ending (a cancel, a lost lease, a stop) sends
//     SIGTERM to the command and its children, and SIGKILL workStopGrace
//     later.
type shellHandler struct {
	command, collection string
}

func (h shellHandler) run(ctx context.Context, task *mscheduler.Task[bson.RawValue]) (bson.RawValue, error) {
	stdin, err := paramsJSON(task.Params)
	if err != nil {
		return bson.RawValue{}, mscheduler.SkipRetry(fmt.Errorf("params as JSON: %w", err))
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", h.command)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(commandEnviron(), h.env(task)...)
	// The command's children are stopped with it: a shell waiting on one
	// would leave it running, and holding the output open.
	ownGroup(cmd)
	cmd.Cancel = func() error {
		time.AfterFunc(workStopGrace, func() { _ = signalGroup(cmd, syscall.SIGKILL) })
		return signalGroup(cmd, syscall.SIGTERM)
	}
	cmd.WaitDelay = workStopGrace + time.Second // then the output is closed, whatever holds it
	stdout := &capped{max: maxWorkOutput}
	stderr := &capped{max: maxWorkErrors, keepEnd: true}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		// The kill stays armed: the shell may have ended at SIGTERM while
		// children that ignore it go on.
		return bson.RawValue{}, context.Cause(ctx)
	}
	if err != nil {
		msg := strings.ToValidUTF8(strings.TrimSpace(stderr.String()), "\uFFFD")
		if msg == "" {
			return bson.RawValue{}, err
		}
		return bson.RawValue{}, fmt.Errorf("%w: %s", err, msg)
	}
	if stdout.cut {
		return bson.RawValue{}, mscheduler.SkipRetry(fmt.Errorf("the command printed more than %d bytes: keep large results elsewhere and print a reference", maxWorkOutput))
	}
	return resultOf(bytes.TrimSpace(stdout.buf.Bytes()))
}

// env is what the command learns of its run besides the params on stdin.
func (h shellHandler) env(task *mscheduler.Task[bson.RawValue]) []string {
	env := []string{
		"MSCHEDULER_KEY=" + task.Key,
		"MSCHEDULER_COLLECTION=" + h.collection,
	}
	if task.Run != nil {
		env = append(env, "MSCHEDULER_RUN_ID="+task.Run.ID, "MSCHEDULER_ATTEMPT="+strconv.Itoa(task.Run.Attempt))
	}
	doc, ok := task.Params.DocumentOK()
	if !ok {
		return env
	}
	elems, _ := doc.Elements() // a params document that does not read was refused at the claim
	for _, e := range elems {
		if v, ok := scalarText(e.Value()); ok && shellName.MatchString(e.Key()) {
			env = append(env, "MSCHEDULER_PARAM_"+e.Key()+"="+v)
		}
	}
	return env
}

// secretVariables are the worker's own secrets: a command is given the
// worker's environment without them.
var secretVariables = []string{"MONGODB_URI", "MSCHEDULER_DASHBOARD_TOKEN"}

// commandEnviron is the environment a command starts with.
func commandEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(secretVariables, name) {
			out = append(out, kv)
		}
	}
	return out
}

// shellName is a name the shell can expand.
var shellName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// scalarText is a string, number or boolean as the shell would write it.
func scalarText(v bson.RawValue) (string, bool) {
	switch v.Type {
	case bson.TypeString:
		s := v.StringValue()
		return s, !strings.ContainsRune(s, 0)
	case bson.TypeInt32, bson.TypeInt64:
		n, _ := v.AsInt64OK()
		return strconv.FormatInt(n, 10), true
	case bson.TypeDouble:
		return strconv.FormatFloat(v.Double(), 'g', -1, 64), true
	case bson.TypeBoolean:
		return strconv.FormatBool(v.Boolean()), true
	}
	return "", false
}

// paramsJSON is v as relaxed extended JSON.
func paramsJSON(v bson.RawValue) ([]byte, error) {
	if v.Type == 0 || v.Type == bson.TypeNull {
		return []byte("null"), nil
	}
	wrapped, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return nil, err
	}
	// {"v":X} -> X
	return bytes.TrimSuffix(bytes.TrimPrefix(wrapped, []byte(`{"v":`)), []byte("}")), nil
}

// resultOf reads what a command printed: one JSON value as what it says,
// anything else (text, or JSON followed by more) as a string.
func resultOf(out []byte) (bson.RawValue, error) {
	var wrapped bson.Raw
	if json.Valid(out) && bson.UnmarshalExtJSON([]byte(`{"v":`+string(out)+`}`), false, &wrapped) == nil {
		return wrapped.Lookup("v"), nil
	}
	raw, err := bson.Marshal(bson.D{{Key: "v", Value: strings.ToValidUTF8(string(out), "\uFFFD")}})
	if err != nil {
		return bson.RawValue{}, err
	}
	return bson.Raw(raw).Lookup("v"), nil
}

// capped keeps up to max bytes written to it: the first ones, or with
// keepEnd the last ones (the end of stderr says why a command failed).
type capped struct {
	buf     bytes.Buffer
	max     int
	keepEnd bool
	cut     bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if !c.keepEnd {
		if room := c.max - c.buf.Len(); len(p) > room {
			p, c.cut = p[:max(room, 0)], true
		}
		c.buf.Write(p)
		return n, nil
	}
	c.buf.Write(p)
	if over := c.buf.Len() - c.max; over > 0 {
		c.buf.Next(over)
		c.cut = true
	}
	return n, nil
}

func (c *capped) String() string { return c.buf.String() }
