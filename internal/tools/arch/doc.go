// Package arch holds the repository's architecture tests, which read the
// real import graph and the real exported API (go list, go/types): the
// layering that docs/architecture.md draws, and that no exported
// identifier of a public package mentions a type only internal code can
// name. It has no code of its own.
package arch
