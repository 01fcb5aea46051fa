package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// completeCommand is the hidden command the completion scripts run with
// the words typed so far. It is not in the commands table, so that
// neither the help nor "did you mean" offers it.
const completeCommand = "__complete"

// shells are the shells "completion" writes a script for, in the order
// the messages name them.
var shells = []string{"bash", "zsh", "fish"}

var completionScripts = map[string]string{"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion}

func runCompletion(_ context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("completion: want one SHELL argument (%s), got %d", strings.Join(shells, ", "), len(args))
	}
	script, ok := completionScripts[args[0]]
	if !ok {
		return usageErrorf("completion: unknown shell %q: want one of %s", args[0], strings.Join(shells, ", "))
	}
	_, err = io.WriteString(c.stdout, script)
	return err
}

// complete prints the candidates for the last of words, one a line. It
// reads no server and no file: a shell waits on it at every Tab.
func (c *cli) complete(words []string) error {
	for _, s := range completions(words) {
		if _, err := fmt.Fprintln(c.stdout, s); err != nil {
			return err
		}
	}
	return nil
}

// completions are the candidates for the last of words (the word being
// typed, possibly empty), given the words before it; the program's name
// is not among words.
func completions(words []string) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	typed, partial := words[:len(words)-1], words[len(words)-1]
	top := newFlagSet("")
	new(globals).register(top)
	before := scan(top, typed)
	if len(before.args) == 0 { // the command is not typed yet
		return completeIn("", top, before, partial)
	}
	name, after := before.args[0], typed[before.first+1:]
	if name == "help" { // help takes no flags, only a command name
		return completeIn(name, newFlagSet(name), scan(newFlagSet(name), after), partial)
	}
	for _, cmd := range commands {
		if cmd.name == name {
			fs := commandFlags(cmd)
			return completeIn(name, fs, scan(fs, after), partial)
		}
	}
	return nil
}

// scanned is what the words typed after a command (or before it) say of
// the next word.
type scanned struct {
	args     []string   // the positional arguments
	first    int        // the index among the words of args[0]
	pending  *flag.Flag // the flag whose value the next word is, if any
	onlyArgs bool       // after "--", every word is an argument
}

// scan reads words as the flag set fs parses them (see parseArgs).
func scan(fs *flag.FlagSet, words []string) scanned {
	var s scanned
	for i, w := range words {
		switch {
		case s.pending != nil:
			s.pending = nil
		case s.onlyArgs, w == "-", !strings.HasPrefix(w, "-"), isNegativeNumber(w):
			if len(s.args) == 0 {
				s.first = i
			}
			s.args = append(s.args, w)
		case w == "--":
			s.onlyArgs = true
		case takesValue(fs, w):
			s.pending = fs.Lookup(strings.TrimLeft(w, "-"))
		}
	}
	return s
}

// completeIn completes partial after the command name (or before any
// command, name ""), whose flags are fs.
func completeIn(name string, fs *flag.FlagSet, s scanned, partial string) []string {
	switch {
	case s.pending != nil:
		return withPrefix(partial, "", flagValues(name, s.pending.Name))
	case s.onlyArgs || !strings.HasPrefix(partial, "-"):
		return withPrefix(partial, "", argValues(name, len(s.args)))
	}
	if flagName, value, ok := strings.Cut(partial, "="); ok {
		if !takesValue(fs, flagName) {
			return nil
		}
		return withPrefix(value, flagName+"=", flagValues(name, strings.TrimLeft(flagName, "-")))
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, spelling(f.Name)) })
	return withPrefix(partial, "", names)
}

// spelling is how the help writes a flag: -c, --collection.
func spelling(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// withPrefix returns the candidates that start with partial, each after
// prefix (the "--flag=" that the word being typed starts with).
func withPrefix(partial, prefix string, candidates []string) []string {
	var out []string
	for _, c := range candidates {
		if strings.HasPrefix(c, partial) {
			out = append(out, prefix+c)
		}
	}
	return out
}

// commandFlags is the flag set of cmd, as its run registers it: run with
// -h, it registers its flags and returns at parsing them, before it
// connects. Its help goes nowhere, and the context is done already, so
// that a command that reached the server would stop at once; if one
// connected all the same, it offers no flags, which the tests catch.
func commandFlags(cmd command) *flag.FlagSet {
	c := &cli{stdout: io.Discard, stderr: io.Discard}
	fs := newFlagSet(cmd.name)
	c.globals.register(fs)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = cmd.run(ctx, c, fs, []string{"-h"})
	if c.client != nil {
		c.disconnect()
		return newFlagSet(cmd.name)
	}
	return fs
}

// flagValues are the values of the flag of the command name that takes
// one of a few: the lists the commands check against. Other flags get
// none, and the shell offers file names.
func flagValues(name, flagName string) []string {
	switch name + " --" + flagName {
	case "list --status":
		return append(strs(statuses), "paused")
	case "list --sort":
		return slices.Sorted(maps.Keys(listSorts))
	case "history --outcome":
		return strs(outcomes)
	case "publish --missed":
		return strs([]mscheduler.MissedPolicy{mscheduler.MissedSkip, mscheduler.MissedCatchUp, mscheduler.MissedRunOnce})
	case "publish --overrun":
		return strs([]mscheduler.OverrunPolicy{mscheduler.OverrunSkip, mscheduler.OverrunQueue})
	}
	return nil
}

// argValues are the values of the positional argument n (from 0) of the
// command name, or of the command itself before any (name "").
func argValues(name string, n int) []string {
	switch {
	case name == "" && n == 0:
		return commandNames()
	case name == "help" && n == 0:
		return commandNames()
	case name == "completion" && n == 0:
		return shells
	}
	return nil
}

// commandNames are the names the help lists: the commands and help.
func commandNames() []string {
	names := make([]string, 0, len(commands)+1)
	for _, cmd := range commands {
		names = append(names, cmd.name)
	}
	return append(names, "help")
}

func strs[S ~string](values []S) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}
