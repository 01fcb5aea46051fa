package main

import "testing"

// TestExample runs the example as `go run` would: it must find every
// planned time run once and every plan finished.
func TestExample(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
