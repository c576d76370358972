// Package csharp is the home of udpgate's C# binding of the C client
// (src/*.cs, a P/Invoke layer over libudpgate for Unity and Godot .NET) and
// of its sample (sample/; see README.md in this directory). The Go tests
// here build the C library with its Makefile and the binding with Mono's
// mcs into a temporary directory and run the sample under mono against a
// sealed udpgate server started in the test, directly and through the lossy
// proxy internal/testkit/netem; they also compare the binding's enums and
// struct layouts with udpgate.h and count its allocations. The package has
// no Go API.
package csharp
