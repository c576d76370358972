// Command exports counts the exported API of packages: identifiers
// (package-level constants, variables, functions, types, and methods on
// exported types) and exported struct fields, leaving out _test.go files,
// as internal/tools/apicount counts them. It is how issue 15's "exports
// before and after" figures are taken:
//
//	go run ./internal/tools/exports ./fastpath ./batchio ./shard ./cookie ./conn
//
// With -v it lists each package's identifiers.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/udpgate/udpgate/internal/tools/apicount"
)

func main() {
	verbose := flag.Bool("v", false, "list the identifiers")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: exports [-v] DIR...")
		os.Exit(2)
	}
	fmt.Printf("%-12s %12s %7s\n", "package", "identifiers", "fields")
	for _, dir := range flag.Args() {
		api, err := apicount.Count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%-12s %12d %7d\n", filepath.Base(dir), len(api.Identifiers), api.Fields)
		if *verbose {
			for _, n := range api.Identifiers {
				fmt.Printf("  %s\n", n)
			}
		}
	}
}
