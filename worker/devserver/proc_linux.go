package devserver

import (
	"os"
	"syscall"
)

// sysProcAttr makes the kernel kill the server if the process that started it dies, so that a
// crashed or interrupted test run leaves no server behind. Pdeathsig fires when the starting
// OS thread exits; the Go runtime keeps its threads unless a goroutine exits while locked to
// one, which is good enough for tests.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// terminateProcess asks the server to shut down cleanly (graceful: it will exit with status 0).
func terminateProcess(p *os.Process) (graceful bool, err error) {
	return true, p.Signal(syscall.SIGTERM)
}
