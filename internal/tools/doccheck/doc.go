// Package doccheck holds the tests that read the project's documents
// (README.md, docs/*.md) and check what they state against the code: the
// numbers of docs/protocol.md's tables (the sealed refusal counter, the
// message payload sizes, the stock channel layout), the drop reasons the
// documents list, the contents line, and that every repository path they
// name exists. A number changed on one side only fails here.
package doccheck
