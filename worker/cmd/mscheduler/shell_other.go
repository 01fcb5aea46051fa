//go:build !unix

package main

import (
	"os/exec"
	"syscall"
)

// ownGroup does nothing where process groups are not Unix's.
func ownGroup(*exec.Cmd) {}

// signalGroup stops the command itself; signals other than a kill do not
// exist here.
func signalGroup(cmd *exec.Cmd, _ syscall.Signal) error {
	return cmd.Process.Kill()
}
