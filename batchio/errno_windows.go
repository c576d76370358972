package batchio

import (
	"errors"
	"syscall"
)

// Winsock error numbers; the syscall package's E* constants on Windows are
// invented values that Winsock never returns.
const (
	errAddrInUse    = syscall.Errno(10048) // WSAEADDRINUSE
	errAddrNotAvail = syscall.Errno(10049) // WSAEADDRNOTAVAIL
	errAccess       = syscall.Errno(10013) // WSAEACCES
	errAFNoSupport  = syscall.Errno(10047) // WSAEAFNOSUPPORT
)

func isErrno(err error, errno syscall.Errno) bool { return errors.Is(err, errno) }
