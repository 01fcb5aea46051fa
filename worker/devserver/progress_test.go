package devserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A build says so before and after (it takes minutes the first time, and a
// caller that printed nothing meanwhile looked hung); a cached binary says
// nothing.
func TestBuildSaysWhatItDoes(t *testing.T) {
	if os.Getenv("GOCACHE") == "" { // keep the go command's own cache where it is
		if dir, err := os.UserCacheDir(); err == nil {
			t.Setenv("GOCACHE", filepath.Join(dir, "go-build"))
		}
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache) // os.UserCacheDir on Linux
	t.Setenv("HOME", cache)           // and on macOS
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "go.mod"), "module example.com/tiny\n\ngo 1.22\n")
	writeFile(t, filepath.Join(src, "main.go"), "package main\n\nfunc main() {}\n")

	var said []string
	progress := func(msg string) { said = append(said, msg) }
	bin, err := buildBinary(context.Background(), src, progress)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(bin, cache) {
		t.Fatalf("binary %s is not in the cache %s", bin, cache)
	}
	if len(said) != 2 || !strings.HasPrefix(said[0], "building the development server") || !strings.HasPrefix(said[1], "built the development server in ") {
		t.Fatalf("a build said %q; want a line before it and one after", said)
	}

	said = nil
	again, err := buildBinary(context.Background(), src, progress)
	if err != nil {
		t.Fatal(err)
	}
	if again != bin || len(said) != 0 {
		t.Fatalf("a cached binary: got %s and said %q; want %s and nothing", again, said, bin)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
