//go:build !windows

package batchio

import (
	"errors"
	"syscall"
)

const (
	errAddrInUse    = syscall.EADDRINUSE
	errAddrNotAvail = syscall.EADDRNOTAVAIL
	errAccess       = syscall.EACCES
	errAFNoSupport  = syscall.EAFNOSUPPORT
)

func isErrno(err error, errno syscall.Errno) bool { return errors.Is(err, errno) }
