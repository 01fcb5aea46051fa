package main

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// completeWords runs the hidden command in the test's process with the
// words typed so far, and returns the lines it printed. It must succeed
// without a word on stderr, whatever the words.
func completeWords(t *testing.T, words ...string) []string {
	t.Helper()
	var stdout, stderr strings.Builder
	if code := run(context.Background(), append([]string{completeCommand}, words...), &stdout, &stderr); code != exitOK || stderr.Len() > 0 {
		t.Fatalf("__complete %q: exit %d, stderr %q; want 0 and nothing", words, code, stderr.String())
	}
	return lines(stdout.String())
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

var globalSpellings = []string{"-c", "--collection", "--connect-timeout", "--db", "--uri", "-v", "--verbose"}

func TestCompleteCandidates(t *testing.T) {
	statuses := []string{"pending", "running", "succeeded", "failed", "finished", "cancelled", "invalid", "paused"}
	for _, tt := range []struct {
		words []string
		want  []string
	}{
		// The command, after global flags and their values if any.
		{[]string{"li"}, []string{"list"}},
		{[]string{"p"}, []string{"publish", "pause", "params-schema"}},
		{[]string{"he"}, []string{"help"}},
		{[]string{"comp"}, []string{"completion"}},
		{[]string{"-c", "tasks", "sh"}, []string{"show"}},
		{[]string{"--uri", "mongodb://h/", "--db=d", "-v", "wa"}, []string{"wait"}},
		{[]string{"-"}, globalSpellings},
		{[]string{"--c"}, []string{"--collection", "--connect-timeout"}},
		{[]string{"-c", ""}, nil}, // the collection: no candidates
		{[]string{"__"}, nil},     // the hidden command is no command
		// Flags, the command's and the global ones.
		{[]string{"list", "--st"}, []string{"--status"}},
		{[]string{"list", "-"}, []string{"--after", "--before", "-c", "--collection", "--connect-timeout", "--db", "--from",
			"--group", "--json", "--limit", "--sort", "--status", "--tag", "--uri", "-v", "--verbose"}},
		{[]string{"history", "--"}, []string{"--after", "--collection", "--connect-timeout", "--db", "--json", "--limit",
			"--outcome", "--since", "--until", "--uri", "--verbose", "--worker"}},
		{[]string{"publish", "--max"}, []string{"--max-failed-runs", "--max-retries"}},
		{[]string{"delete", "KEY", "--f"}, []string{"--force"}},
		{[]string{"show", "-v"}, []string{"-v"}},
		{[]string{"pause", "--co"}, []string{"--collection", "--connect-timeout"}},
		{[]string{"completion", "--v"}, []string{"--verbose"}},
		{[]string{"list", "--json", "--li"}, []string{"--limit"}},
		// Values, as the next word or after "=".
		{[]string{"list", "--status", ""}, statuses},
		{[]string{"list", "--status", "p"}, []string{"pending", "paused"}},
		{[]string{"list", "--status=p"}, []string{"--status=pending", "--status=paused"}},
		{[]string{"list", "-status=ru"}, []string{"-status=running"}},
		{[]string{"-c", "t", "list", "--tag", "x", "--sort", ""}, []string{"key", "priority", "run_at"}},
		{[]string{"list", "--sort="}, []string{"--sort=key", "--sort=priority", "--sort=run_at"}},
		{[]string{"history", "--outcome", "e"}, []string{"expired"}},
		{[]string{"history", "KEY", "--outcome="}, []string{"--outcome=succeeded", "--outcome=failed", "--outcome=expired",
			"--outcome=released", "--outcome=revoked", "--outcome=cancelled", "--outcome=unknown"}},
		{[]string{"publish", "k", "--missed", ""}, []string{"skip", "catch_up", "run_once"}},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}},
		{[]string{"completion", "f"}, []string{"fish"}},
		{[]string{"help", "pu"}, []string{"publish"}},
		{[]string{"help", ""}, commandNames()},
		// Nothing to offer.
		{[]string{"params-schema", "--set", ""}, nil}, // a file: the shell offers them
		{[]string{"list", "--group", "--st"}, nil},    // the value of --group
		{[]string{"list", "--json=t"}, nil},
		{[]string{"list", "--nope="}, nil},
		{[]string{"list", ""}, nil},
		{[]string{"show", "--", "-"}, nil},
		{[]string{"completion", "bash", ""}, nil},
		{[]string{"help", "list", ""}, nil},
		{[]string{"help", "-"}, nil},
		{[]string{"nope", ""}, nil},
		{[]string{"nope", "-"}, nil},
		{[]string{"__complete", ""}, nil},
	} {
		if got := completeWords(t, tt.words...); !slices.Equal(got, tt.want) {
			t.Errorf("__complete %q:\n got %q\nwant %q", tt.words, got, tt.want)
		}
	}
}

func TestCompleteCommandNames(t *testing.T) {
	got := completeWords(t, "")
	if len(got) != len(commands)+1 || !slices.Contains(got, "help") || !slices.Contains(got, "completion") || slices.Contains(got, completeCommand) {
		t.Errorf("__complete \"\": %q; want the %d commands and help, without %s", got, len(commands), completeCommand)
	}
	if noWords := completeWords(t); !slices.Equal(noWords, got) {
		t.Errorf("__complete with no words: %q; want %q", noWords, got)
	}
}

// TestCompletionOffersEveryFlag checks the flags offered against what the
// help of each command lists, and against the flags the sources register.
func TestCompletionOffersEveryFlag(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  -([^\s=]+)`)
	offered := map[string]bool{}
	for _, cmd := range commands {
		var stdout, stderr strings.Builder
		if code := run(context.Background(), []string{"help", cmd.name}, &stdout, &stderr); code != exitOK {
			t.Fatalf("help %s: exit %d, stderr %q", cmd.name, code, stderr.String())
		}
		want := slices.Clone(globalSpellings)
		for _, m := range flagLine.FindAllStringSubmatch(stdout.String(), -1) {
			want = append(want, spelling(m[1]))
		}
		got := completeWords(t, cmd.name, "-")
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: completion offers %q; its help lists %q", cmd.name, got, want)
		}
		for _, f := range got {
			offered[strings.TrimLeft(f, "-")] = true
		}
	}
	registered := registeredFlags(t)
	if len(registered) < 50 {
		t.Fatalf("found %d flags registered in the sources, want more: is the scan broken?", len(registered))
	}
	for _, name := range registered {
		if !offered[name] {
			t.Errorf("flag %q is registered in the sources but no command's completion offers it (registered after parsing?)", name)
		}
	}
}

// registeredFlags are the names of the flags the package's sources
// register on a flag set named fs, as every command's is: a flag that
// running a command with -h would miss is still among them.
func registeredFlags(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if name, ok := flagNameArg(n); ok {
				names = append(names, name)
			}
			return true
		})
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// flagMethods are the methods of flag.FlagSet that register a flag, with
// the index of the name among their arguments.
var flagMethods = map[string]int{
	"Bool": 0, "Duration": 0, "Float64": 0, "Func": 0, "BoolFunc": 0, "Int": 0, "Int64": 0, "String": 0, "Uint": 0, "Uint64": 0,
	"BoolVar": 1, "DurationVar": 1, "Float64Var": 1, "IntVar": 1, "Int64Var": 1, "StringVar": 1, "TextVar": 1, "UintVar": 1,
	"Uint64Var": 1, "Var": 1,
}

// flagNameArg is the flag name that the call n registers: fs.Bool("json",
// ...), fs.Var(v, "tag", ...), durationVar(fs, p, "timeout", ...).
func flagNameArg(n ast.Node) (string, bool) {
	call, ok := n.(*ast.CallExpr)
	if !ok {
		return "", false
	}
	at := -1
	switch fun := call.Fun.(type) {
	case *ast.SelectorExpr:
		if i, ok := flagMethods[fun.Sel.Name]; ok && isIdent(fun.X, "fs") {
			at = i
		}
	case *ast.Ident:
		if fun.Name == "durationVar" {
			at = 2
		}
	}
	if at < 0 || at >= len(call.Args) {
		return "", false
	}
	lit, ok := call.Args[at].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	name, err := strconv.Unquote(lit.Value)
	return name, err == nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func TestCompletionCommand(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := runCommand(t, nil, "completion", shell).wantOK(t)
		for _, want := range []string{"mscheduler", completeCommand} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("completion %s does not mention %q:\n%s", shell, want, r.stdout)
			}
		}
		checkSyntax(t, shell, r.stdout)
	}
	runCommand(t, nil, "completion", "tcsh").wantError(t, exitUsage, `unknown shell "tcsh"`, "bash, zsh, fish")
	runCommand(t, nil, "completion").wantError(t, exitUsage, "SHELL", "bash")
	runCommand(t, nil, "completion", "bash", "zsh").wantError(t, exitUsage, "SHELL")

	r := runCommand(t, nil, "help", "completion").wantOK(t)
	if !strings.HasPrefix(r.stdout, "Usage: mscheduler completion bash|zsh|fish\n") {
		t.Errorf("help completion:\n%s", r.stdout)
	}
}

// checkSyntax has the shell read script without running it, if the shell
// is installed.
func checkSyntax(t *testing.T, shell, script string) {
	t.Helper()
	check := map[string][]string{"bash": {"-n"}, "zsh": {"-n"}, "fish": {"--no-execute"}}[shell]
	path, err := exec.LookPath(shell)
	if err != nil {
		return // cannot check what is not installed
	}
	file := filepath.Join(t.TempDir(), "completion."+shell)
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(path, append(check, file)...).CombinedOutput(); err != nil {
		t.Errorf("%s %s: %v\n%s", shell, strings.Join(check, " "), err, out)
	}
}

// TestCompleteHidden checks that the hidden command runs as the scripts
// run it, and that neither the help nor "did you mean" offers it.
func TestCompleteHidden(t *testing.T) {
	r := runCommand(t, nil, completeCommand, "list", "--st").wantOK(t)
	if r.stdout != "--status\n" {
		t.Errorf("__complete list --st: %q, want \"--status\\n\"", r.stdout)
	}
	help := runCommand(t, nil, "help").wantOK(t)
	if strings.Contains(help.stdout, completeCommand) || !strings.Contains(help.stdout, "  completion bash|zsh|fish\n") {
		t.Errorf("help lists %s, or not completion:\n%s", completeCommand, help.stdout)
	}
	for _, typo := range []string{"complete", "_complete", "__complet"} {
		r := runCommand(t, nil, typo)
		if r.code != exitUsage || strings.Contains(r.stderr, completeCommand) {
			t.Errorf("%s: exit %d, stderr %q; want 2, without %s", typo, r.code, r.stderr, completeCommand)
		}
	}
}

// TestCompletionBash sources the bash script and calls its function as
// bash would at a Tab, with the built command in PATH.
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		return // cannot run what is not installed
	}
	script := filepath.Join(t.TempDir(), "mscheduler.bash")
	if err := os.WriteFile(script, []byte(runCommand(t, nil, "completion", "bash").wantOK(t).stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	// Each case: the line up to the cursor, and COMP_WORDS as bash splits
	// it (at "=" too).
	cases := []struct {
		line  string
		words string
		want  string
	}{
		{"mscheduler li", "(mscheduler li)", "list"},
		{"mscheduler ", "(mscheduler '')", strings.Join(commandNames(), " ")},
		{"mscheduler -c tasks list --so", "(mscheduler -c tasks list --so)", "--sort"},
		{"mscheduler list --status p", "(mscheduler list --status p)", "pending paused"},
		{"mscheduler list --status=p", "(mscheduler list --status = p)", "pending paused"},
		{"mscheduler list --sort=", "(mscheduler list --sort =)", "key priority run_at"},
		{"mscheduler completion ", "(mscheduler completion '')", "bash zsh fish"},
		{"mscheduler show KEY ", "(mscheduler show KEY '')", ""},
	}
	var driver strings.Builder
	driver.WriteString("source " + strconv.Quote(script) + "\n")
	for _, c := range cases {
		driver.WriteString("COMP_LINE=" + strconv.Quote(c.line) + "; COMP_POINT=${#COMP_LINE}; COMP_WORDS=" + c.words +
			"; COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _mscheduler; echo \"${COMPREPLY[*]}\"\n")
	}
	driver.WriteString("complete -p mscheduler\n")
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", driver.String())
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	got := lines(string(out))
	if len(got) != len(cases)+1 {
		t.Fatalf("bash printed %q; want %d lines", got, len(cases)+1)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("%q<Tab>: COMPREPLY %q, want %q", c.line, got[i], c.want)
		}
	}
	if want := "complete -o default -F _mscheduler mscheduler"; got[len(cases)] != want {
		t.Errorf("complete -p: %q, want %q", got[len(cases)], want)
	}
}
