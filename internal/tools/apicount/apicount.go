// Package apicount counts the exported API of a package directory: the
// identifiers (package-level constants, variables, functions, types, and
// methods on exported types) and the exported struct fields, leaving out
// _test.go files. The exports command prints it; the architecture test
// (internal/tools/arch) holds every package of the module to a limit with it.
package apicount

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
)

// API is a package's exported API as this platform builds it (build tags
// applied, so a function written once per platform counts once).
type API struct {
	Identifiers []string // Name, or Type.Method for a method
	Fields      int
}

// Count reads the package in dir.
func Count(dir string) (API, error) {
	var api API
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		return api, err
	}
	fset := token.NewFileSet()
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return api, err
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					api.Identifiers = append(api.Identifiers, d.Name.Name)
				} else if recv, ok := recvName(d.Recv); ok {
					api.Identifiers = append(api.Identifiers, recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								api.Identifiers = append(api.Identifiers, n.Name)
							}
						}
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						api.Identifiers = append(api.Identifiers, s.Name.Name)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									if n.IsExported() {
										api.Fields++
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return api, nil
}

// recvName is the name of a method's receiver type, and whether it is
// exported.
func recvName(r *ast.FieldList) (string, bool) {
	t := r.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name, x.IsExported()
		default:
			return "", false
		}
	}
}
