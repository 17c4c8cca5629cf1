module github.com/shardcache/shardcache/tools/apicheck

go 1.26.0

require (
	golang.org/x/exp v0.0.0-20261121134650-e1094eeca1b5
	golang.org/x/mod v0.43.0
	golang.org/x/tools v0.53.0
)

require golang.org/x/sync v0.25.0 // indirect
