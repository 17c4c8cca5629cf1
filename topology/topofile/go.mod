module github.com/shardcache/shardcache/topology/topofile

go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/fsnotify/fsnotify v1.10.1
	github.com/shardcache/shardcache v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.5
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/twmb/murmur3 v1.2.2 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

replace github.com/shardcache/shardcache => ../..
