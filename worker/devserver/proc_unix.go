//go:build unix && !linux

package devserver

import (
	"os"
	"syscall"
)

// sysProcAttr sets nothing: parent-death signals are Linux-only, so call Stop or Kill.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// terminateProcess asks the server to shut down cleanly (graceful: it will exit with status 0).
func terminateProcess(p *os.Process) (graceful bool, err error) {
	return true, p.Signal(syscall.SIGTERM)
}
