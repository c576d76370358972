package arch

import (
	"bytes"
	"encoding/json"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/udpgate/udpgate/internal/tools/apicount"
)

const module = "github.com/udpgate/udpgate"

// layers is the layering of docs/architecture.md, lowest first: a package
// may import the module's packages of lower layers only. A package not
// listed (a command, a tool, a test kit, a traffic generator) is in the top
// layer, so it may import anything and nothing listed may import it.
var layers = [][]string{
	{"cookie", "shard", "token", "batchio", "internal/seal", "internal/congestion", "internal/egress", "internal/defaults"},
	{"internal/protocol"},
	{"internal/wire", "internal/ratelimit", "internal/seqwin", "internal/wire/wiretest"},
	{"internal/handshake"},
	{"fastpath", "message", "netsim"},
	{"internal/msgcfg"},
	{"conn"},
	{"metrics"},
}

// pure are the sans-I/O packages: no sockets, files, system calls or
// clock (time is a float64 argument), so every rule is table-tested.
var pure = []string{"internal/protocol", "internal/wire", "internal/ratelimit", "internal/seqwin",
	"internal/handshake", "fastpath", "cookie"}

// impure are the standard and external imports a pure package may not have.
var impure = []string{"net", "net/http", "os", "os/exec", "syscall", "time", "golang.org/x/sys/unix",
	"golang.org/x/net/ipv4", "golang.org/x/net/ipv6"}

type pkg struct {
	ImportPath string
	Dir        string
	Name       string
	Imports    []string
	Export     string
}

// list runs go list over the module, with export data when export is set.
func list(t *testing.T, export bool) []pkg {
	t.Helper()
	args := []string{"list", "-json"}
	if export {
		args = append(args, "-export", "-deps")
	}
	cmd := exec.Command("go", append(args, module+"/...")...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var ps []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

func layer(r string) int {
	for i, l := range layers {
		if slices.Contains(l, r) {
			return i
		}
	}
	return len(layers)
}

// TestLayering fails when a package's imports break the layering.
func TestLayering(t *testing.T) {
	ps := list(t, false)
	seen := map[string]bool{}
	for _, p := range ps {
		r, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		seen[r] = true
		for _, imp := range p.Imports {
			if slices.Contains(pure, r) && slices.Contains(impure, imp) {
				t.Errorf("%s imports %s: the protocol packages do no I/O and read no clock", r, imp)
			}
			ir, ok := rel(imp)
			if !ok {
				continue
			}
			if ir == "fastpath" {
				t.Errorf("%s imports fastpath: inside the module, import the internal package it fronts", r)
			}
			if layer(r) <= len(layers)-1 && layer(ir) >= layer(r) {
				t.Errorf("%s (layer %d) imports %s (layer %d): docs/architecture.md allows lower layers only",
					r, layer(r), ir, layer(ir))
			}
		}
	}
	for _, l := range layers {
		for _, r := range l {
			if !seen[r] {
				t.Errorf("layers lists %s, which is not a package any more: update the table and docs/architecture.md", r)
			}
		}
	}
}

// TestPublicAPINamesNoInternalType fails when an exported identifier of a
// public package (one a user outside the module can import) mentions a type
// of an internal package that no public package names by alias: a user
// could not declare a value of it, as happened when fastpath's SealConn took
// an *internal/seal.Sealer.
func TestPublicAPINamesNoInternalType(t *testing.T) {
	ps := list(t, true)
	exports := map[string]string{}
	for _, p := range ps {
		exports[p.ImportPath] = p.Export
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	var public []*types.Package
	for _, p := range ps {
		r, ok := rel(p.ImportPath)
		if !ok || p.Name == "main" || isInternal(p.ImportPath) || strings.HasPrefix(r, "bench") {
			continue
		}
		tp, err := imp.Import(p.ImportPath)
		if err != nil {
			t.Fatalf("%s: %v", p.ImportPath, err)
		}
		public = append(public, tp)
	}
	// Internal types a public package publishes by alias.
	named := map[*types.TypeName]bool{}
	for _, tp := range public {
		for _, n := range tp.Scope().Names() {
			if tn, ok := tp.Scope().Lookup(n).(*types.TypeName); ok && tn.Exported() && tn.IsAlias() {
				if nt, ok := types.Unalias(tn.Type()).(*types.Named); ok {
					named[nt.Obj()] = true
				}
			}
		}
	}
	w := walker{t: t, named: named, seen: map[types.Type]bool{}}
	for _, tp := range public {
		for _, n := range tp.Scope().Names() {
			obj := tp.Scope().Lookup(n)
			if obj.Exported() {
				w.where = tp.Path() + "." + n
				w.typ(obj.Type())
			}
		}
	}
}

// maxExports bounds the exported identifiers of each package of the
// module (issue 20): a package that needs more does more than one job.
const maxExports = 100

// TestExportLimit fails when a package of the module exports more than
// maxExports identifiers, as internal/tools/apicount counts them (and the
// exports command prints them).
func TestExportLimit(t *testing.T) {
	for _, p := range list(t, false) {
		if _, ok := rel(p.ImportPath); !ok {
			continue
		}
		api, err := apicount.Count(p.Dir)
		if err != nil {
			t.Fatalf("%s: %v", p.ImportPath, err)
		}
		if n := len(api.Identifiers); n > maxExports {
			t.Errorf("%s exports %d identifiers, more than %d: unexport what a user does not set or read, "+
				"or move a job to its own package (go run ./internal/tools/exports -v %s)", p.ImportPath, n, maxExports, p.Dir)
		}
	}
}

func isInternal(path string) bool {
	return strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal")
}

// walker visits every type reachable through a public API: signatures,
// exported fields and methods, element types.
type walker struct {
	t     *testing.T
	named map[*types.TypeName]bool
	seen  map[types.Type]bool
	where string
}

func (w *walker) typ(t types.Type) {
	if t == nil || w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		w.typ(types.Unalias(t))
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil && isInternal(obj.Pkg().Path()) && !w.named[obj] {
			w.t.Errorf("%s mentions %s.%s, which no public package names", w.where, obj.Pkg().Path(), obj.Name())
		}
		if obj.Pkg() == nil || !strings.HasPrefix(obj.Pkg().Path(), module) {
			return // the standard library's and dependencies' own APIs
		}
		for i := range t.NumMethods() {
			if m := t.Method(i); m.Exported() {
				w.typ(m.Type())
			}
		}
		for i := range t.TypeArgs().Len() {
			w.typ(t.TypeArgs().At(i))
		}
		w.typ(t.Underlying())
	case *types.Struct:
		for i := range t.NumFields() {
			if f := t.Field(i); f.Exported() {
				w.typ(f.Type())
			}
		}
	case *types.Interface:
		for i := range t.NumMethods() {
			w.typ(t.Method(i).Type())
		}
	case *types.Signature:
		for i := range t.Params().Len() {
			w.typ(t.Params().At(i).Type())
		}
		for i := range t.Results().Len() {
			w.typ(t.Results().At(i).Type())
		}
	case *types.Pointer:
		w.typ(t.Elem())
	case *types.Slice:
		w.typ(t.Elem())
	case *types.Array:
		w.typ(t.Elem())
	case *types.Map:
		w.typ(t.Key())
		w.typ(t.Elem())
	case *types.Chan:
		w.typ(t.Elem())
	}
}
