// Command exports counts the exported API of packages: identifiers
// (package-level constants, variables, functions, types, and methods on
// exported types) and exported struct fields, leaving out _test.go files.
// It is how issue 15's "exports before and after" figures are taken:
//
//	go run ./internal/tools/exports ./fastpath ./batchio ./shard ./cookie ./conn
package main

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: exports DIR...")
		os.Exit(2)
	}
	fmt.Printf("%-12s %12s %7s\n", "package", "identifiers", "fields")
	for _, dir := range os.Args[1:] {
		ids, fields, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%-12s %12d %7d\n", filepath.Base(dir), ids, fields)
	}
}

// count counts the package in dir as this platform builds it (build tags
// applied, so a function written once per platform counts once).
func count(dir string) (ids, fields int, err error) {
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		return 0, 0, err
	}
	fset := token.NewFileSet()
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return 0, 0, err
		}
		{
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv != nil && !recvExported(d.Recv) {
						continue
					}
					ids++
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									ids++
								}
							}
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							ids++
							if st, ok := s.Type.(*ast.StructType); ok {
								for _, fl := range st.Fields.List {
									for _, n := range fl.Names {
										if n.IsExported() {
											fields++
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return ids, fields, nil
}

func recvExported(r *ast.FieldList) bool {
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
			return x.IsExported()
		default:
			return false
		}
	}
}
