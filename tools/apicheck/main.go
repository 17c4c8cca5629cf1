// Command apicheck keeps the API of shardcache's public packages from
// breaking by accident between versions.
//
// At a release it records the API of every package listed in
// api/packages.txt, as export data, in api/vX.Y.Z/ (one file per
// package, in the format of golang.org/x/exp/cmd/apidiff -w):
//
//	go run . -root ../.. -write v0.3.0    (make api VERSION=v0.3.0)
//
// Otherwise it compares those packages, as the working tree has them,
// with the latest version recorded, and fails on an incompatible change
// that CHANGELOG.md's Unreleased section does not acknowledge under a
// "### Breaking" heading, in a backquoted name of the package and the
// identifier (`client.Options`, `topology/topofile.Load`; `client` alone
// for a whole package). Compatible changes (additions) are printed as
// information:
//
//	go run . -root ../..                  (make test)
//
// docs/releasing.md is the workflow.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	root := flag.String("root", "../..", "the directory of the module whose API is checked")
	version := flag.String("write", "", "record the API as this version (vX.Y.Z) instead of checking it")
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *version != "" {
		if err := Write(*root, *version, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "apicheck:", err)
			os.Exit(1)
		}
		return
	}
	ok, err := Check(*root, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}
