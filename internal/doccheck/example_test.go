package doccheck_test

import (
	"fmt"

	"github.com/shardcache/shardcache/internal/doccheck"
)

func ExampleBlocks() {
	page := "# Quick start\n\n```go\nerr := c.Set(ctx, \"k\", []byte(\"v\"), 0)\n_ = err\n```\n\n```sh\nmake test\n```\n"
	for _, b := range doccheck.Blocks("README.md", []byte(page)) {
		fmt.Printf("%s:%d %s, %d Go source(s)\n", b.Page, b.Line, b.Lang, len(b.Sources()))
	}
	// Output:
	// README.md:4 go, 1 Go source(s)
	// README.md:9 sh, 0 Go source(s)
}
