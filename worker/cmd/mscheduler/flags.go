package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// usageError is a wrong command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelpShown ends a run that printed help: exit status 0.
var errHelpShown = errors.New("help shown")

// newFlagSet returns a flag set that reports errors only through Parse's
// result, so that each is printed once, on one line.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseArgs parses flags anywhere among args, as operators type them
// ("show KEY --json"), and returns the other arguments in order. After
// "--" every argument is positional, for keys that start with '-'.
func (c *cli) parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	// A negative number that is no flag's value is an argument ("skip KEY
	// -1"), which the flag package would take for a flag.
	for i, a := range args {
		if a == "--" {
			break
		}
		if isNegativeNumber(a) && (i == 0 || !takesValue(fs, args[i-1])) {
			before, err := c.parseArgs(fs, args[:i])
			if err != nil {
				return nil, err
			}
			after, err := c.parseArgs(fs, args[i+1:])
			if err != nil {
				return nil, err
			}
			return append(append(before, a), after...), nil
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, c.flagError(err, fs.Name(), fs)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

func isNegativeNumber(s string) bool {
	if len(s) < 2 || s[0] != '-' {
		return false
	}
	for _, r := range s[1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// takesValue reports whether arg is a flag of fs that takes the next
// argument as its value.
func takesValue(fs *flag.FlagSet, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if name == arg || strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// flagError turns an error of fs.Parse into a usage error, or prints the
// help that -h asked for.
func (c *cli) flagError(err error, name string, fs *flag.FlagSet) error {
	if !errors.Is(err, flag.ErrHelp) {
		if name == "" {
			return usageErrorf("%v; run \"mscheduler help\"", err)
		}
		return usageErrorf("%s: %v; run \"mscheduler %s -h\"", name, err, name)
	}
	if name == "" {
		c.printUsage()
		return errHelpShown
	}
	for _, cmd := range commands {
		if cmd.name == name {
			fmt.Fprintf(c.stdout, "Usage: mscheduler %s %s\n\n%s.\n", cmd.name, cmd.synopsis, capitalize(cmd.summary))
			printOwnFlags(c.stdout, fs)
			fmt.Fprintln(c.stdout, "\nThe global flags (mscheduler help) are accepted too.")
		}
	}
	return errHelpShown
}

// printOwnFlags lists the flags of a command without the global ones,
// which "mscheduler help" lists.
func printOwnFlags(w io.Writer, fs *flag.FlagSet) {
	own := newFlagSet(fs.Name())
	fs.VisitAll(func(f *flag.Flag) {
		if !isGlobal(f.Name) {
			own.Var(f.Value, f.Name, f.Usage)
		}
	})
	n := 0
	own.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	own.SetOutput(w)
	own.PrintDefaults()
}

// wantArgs checks the positional arguments of the command name against
// their names.
func wantArgs(name string, args []string, names ...string) error {
	switch {
	case len(args) == len(names):
		return nil
	case len(names) == 0:
		return usageErrorf("%s takes no arguments, got %d (%s)", name, len(args), strings.Join(args, " "))
	}
	return usageErrorf("%s: want %s, got %d argument%s", name, strings.Join(names, " "), len(args), plural(len(args)))
}

func (c *cli) printUsage() {
	var b strings.Builder
	b.WriteString("Usage: mscheduler [global flags] <command> [flags] [arguments]\n\nCommands:\n")
	for _, cmd := range commands {
		fmt.Fprintf(&b, "%s\n            %s\n", strings.TrimRight(fmt.Sprintf("  %-9s %s", cmd.name, cmd.synopsis), " "), cmd.summary)
	}
	b.WriteString(`  help      [COMMAND]
            print this help, or the flags of a command

Global flags, before or after the command:
  -c, --collection NAME   the task collection (required but for dev, dashboard, gateway, workers and version)
  --db NAME               the database (default $MSCHEDULER_DB, else "mscheduler")
  --uri URI               the connection string (default $MONGODB_URI)
  --connect-timeout D     how long to look for the server (default 5s)
  -v, --verbose           print errors in full, as the driver gives them
  --version               print the version

"mscheduler help <command>" (or "mscheduler <command> -h") lists the flags of a command.
`)
	fmt.Fprint(c.stdout, b.String())
}

// stringsFlag collects the values of a repeated flag: --tag a --tag b.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// listFlag is a comma-separated list; an empty string is an empty list,
// which clears the field it sets.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = []string{}
	if v == "" {
		return nil
	}
	for _, item := range strings.Split(v, ",") {
		*l = append(*l, strings.TrimSpace(item))
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// durationFlag is a duration that says, when it cannot be read, that a
// unit is needed: "5" is not a duration, "5s" is.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("must be a duration with a unit, like 500ms, 5s or 2m, got %q", v)
	}
	*f.d = d
	return nil
}

// durationVar registers a durationFlag.
func durationVar(fs *flag.FlagSet, p *time.Duration, name, usage string) {
	fs.Var(durationFlag{p}, name, usage)
}

// timeFlag is an RFC 3339 time.
type timeFlag struct{ t *time.Time }

func (f timeFlag) String() string {
	if f.t == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f timeFlag) Set(v string) error {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return fmt.Errorf("must be an RFC 3339 time, like 2026-12-24T18:00:00Z, got %q", v)
	}
	*f.t = t
	return nil
}
