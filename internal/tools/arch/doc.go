// Package arch holds the repository's architecture tests, which read the
// real import graph and the real exported API (go list, go/types): the
// layering that docs/architecture.md draws, that no exported identifier
// of a public package mentions a type only internal code can name, and that
// no package exports more than 100 identifiers (counted by
// internal/tools/apicount). It has no code of its own.
package arch
