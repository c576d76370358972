package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's top directory, from this package's.
const root = "../../.."

// readDoc returns the file name (relative to the repository's top).
func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text under the heading that starts with heading
// ("## 13.", "### 11.3"), up to the next heading of its level or above.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	level := strings.IndexByte(heading, ' ')
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, heading) {
			continue
		}
		var b strings.Builder
		for _, m := range lines[i+1:] {
			if h := strings.IndexByte(m, ' '); h > 0 && h <= level && strings.Trim(m[:h], "#") == "" {
				break
			}
			b.WriteString(m)
			b.WriteByte('\n')
		}
		return b.String()
	}
	t.Fatalf("no section %q", heading)
	return ""
}

// row returns the cells of the first table row in text whose first cell
// is key, without the backquotes around them.
func row(t *testing.T, text, key string) []string {
	t.Helper()
	for _, r := range rows(text) {
		if r[0] == key {
			return r
		}
	}
	t.Fatalf("no table row %q", key)
	return nil
}

// rows returns the cells of every table row in text (header rows too,
// but not the separator rows).
func rows(text string) [][]string {
	var out [][]string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") || strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i, c := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(c), "`")
		}
		out = append(out, cells)
	}
	return out
}

// labels returns the `backquoted` words of text that are snake_case
// labels.
func labels(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range labelRE.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

var labelRE = regexp.MustCompile("`([a-z][a-z0-9_]*)`")
