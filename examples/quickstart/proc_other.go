//go:build !linux

package main

import "syscall"

// sysProcAttr sets nothing: parent-death signals are Linux-only.
func sysProcAttr() *syscall.SysProcAttr { return nil }
