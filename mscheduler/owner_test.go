package mscheduler_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// updateOperators are the operators of an update document.
var updateOperators = []string{"$set", "$unset", "$inc", "$min", "$max", "$push", "$pull", "$pullAll", "$addToSet",
	"$setOnInsert", "$currentDate", "$rename", "$mul", "$bit", "$pop"}

// metaWriters write the collections beside the task collection (its
// metadata, the workers registry), never a task: they may build updates
// of their own documents.
var metaWriters = []string{"registry.go", "schema.go", "paramschema.go", filepath.Join("internal", "upkeep", "maintain.go"), filepath.Join("internal", "peers", "peers.go")}

// TestOnlyTheOwnerWritesTaskState holds the design rule that makes a
// status-bound field forgotten by one path impossible: no code of the
// library but internal/taskstate builds an update document, so every
// change of a task's state goes through the owner's transitions (and the
// one function that writes the fields bound to the status). It reads the
// source: an update operator spelled anywhere else fails it.
func TestOnlyTheOwnerWritesTaskState(t *testing.T) {
	var found []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (path == filepath.Join("internal", "taskstate") || path == "mschedulertest"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		case slices.Contains(metaWriters, path):
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && slices.Contains(updateOperators, s) {
					found = append(found, path+": "+s)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Errorf("update operators outside internal/taskstate (ask the owner of a task's state for the update):\n%s", strings.Join(found, "\n"))
	}
	// The rule must have something to hold against: the owner does spell
	// them.
	if !ownerSpells(t, "$set") {
		t.Fatal("internal/taskstate spells no $set: the test reads the wrong tree")
	}
}

func ownerSpells(t *testing.T, op string) bool {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), filepath.Join("internal", "taskstate"), func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	spelled := false
	for _, pkg := range pkgs {
		ast.Inspect(pkg, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Value == strconv.Quote(op) {
				spelled = true
			}
			return true
		})
	}
	return spelled
}
