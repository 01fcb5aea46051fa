//go:build !unix

package devserver

import (
	"os"
	"syscall"
)

// sysProcAttr sets nothing: parent-death signals are Linux-only, so call Stop or Kill.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// terminateProcess kills the server (not graceful): there is no SIGTERM to send on this system.
func terminateProcess(p *os.Process) (graceful bool, err error) {
	return false, p.Kill()
}
