// Package cclient is the home of udpgate's C client library (include/,
// src/; see README.md in this directory) and of its tests: the Go tests
// here build the library and small C programs (test/) with the system's C
// compiler into a temporary directory and run them against a udpgate
// server started in the test, through the lossy proxy internal/testkit/netem,
// against every wire vector file, under AddressSanitizer and
// UndefinedBehaviorSanitizer, and under libFuzzer. The package has no Go API.
package cclient
