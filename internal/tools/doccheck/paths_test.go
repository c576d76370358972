package doccheck

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pathRE finds what may name a file of the repository: a `code span`
// without spaces, or a Markdown link's target.
var pathRE = regexp.MustCompile("`([^`\\s]+)`|\\]\\(([^)\\s#]+)")

// fileRE: a name with an extension the repository's files have.
var fileRE = regexp.MustCompile(`\.(go|md|json|txt|sh|toml|c|ya?ml)$`)

// TestPathsExist: every repository path that README.md and docs/*.md
// name (a code span or a link under one of the repository's top-level
// directories or files) exists, so a reader, or a client author looking
// for the vectors, is not sent to a file that moved (issue 31: README and
// protocol.md named internal/wire/testdata/vectors.json).
func TestPathsExist(t *testing.T) {
	tops := map[string]bool{}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		tops[e.Name()] = true
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"))
	checked := 0
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		rel = filepath.ToSlash(rel)
		text := readDoc(t, rel)
		for _, m := range pathRE.FindAllStringSubmatch(text, -1) {
			p := m[1]
			if m[2] != "" {
				if strings.Contains(m[2], "://") {
					continue
				}
				p = path.Join(path.Dir(rel), m[2])
			}
			p = strings.TrimPrefix(strings.TrimSuffix(p, "/"), "./")
			if strings.ContainsAny(p, "…{*") || !tops[strings.Split(p, "/")[0]] ||
				!strings.Contains(p, "/") && !fileRE.MatchString(p) {
				continue
			}
			checked++
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				t.Errorf("%s names %s, which does not exist", rel, p)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d paths checked: the pattern finds too little", checked)
	}
}
