package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// params-schema shows, sets and removes the collection's params schema;
// publish refuses params it refuses, naming the flag and the field, and
// writes nothing.
func TestParamsSchemaCommand(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	schema := `{"type": "object", "required": ["to"], "properties": {"to": {"type": "string", "pattern": "@"}}}`
	for name, text := range map[string]string{good: schema, bad: `{"type": "strang"}`} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r := f.run("params-schema").wantOK(t); !strings.Contains(r.stdout, "has no params schema") {
		t.Errorf("params-schema without one printed %q", r.stdout)
	}
	f.run("params-schema", "--set", bad).wantError(t, exitUsage, "--set "+bad+": not a JSON Schema")
	f.run("params-schema", "--set", filepath.Join(dir, "missing.json")).wantError(t, exitUsage, "--set: open")
	f.run("params-schema", "--set", good).wantOK(t)
	if r := f.run("params-schema").wantOK(t); strings.TrimSpace(r.stdout) != schema {
		t.Errorf("params-schema printed %q, want the schema set", r.stdout)
	}
	f.run("publish", "typed-1", "--params", `{"to": 5}`).wantError(t, exitUsage, `publish "typed-1": --params: at '/to': got number, want string`)
	f.run("show", "typed-1").wantError(t, exitError, "task not found")
	f.run("publish", "typed-1", "--params", `{"to": "ada@example.com"}`).wantOK(t)
	f.run("params-schema", "--remove").wantOK(t)
	f.run("publish", "typed-2", "--params", `{"to": 5}`).wantOK(t)
}
