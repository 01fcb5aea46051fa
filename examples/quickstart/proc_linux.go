package main

import "syscall"

// sysProcAttr makes the kernel kill a worker if the coordinator dies, so
// that an interrupted quickstart leaves no worker behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
