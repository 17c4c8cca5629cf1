//go:build doccheck_deps

// This file is never built (nothing sets its tag): it names the packages
// the pages' code imports, Fragment's and those of the pages' whole files,
// so that go mod tidy keeps their modules in this module's go.mod, where
// TestPagesCompile's build finds them. TestDepsCoverFragment holds it to
// Fragment's imports.

package doccheck

import (
	_ "github.com/bradfitz/gomemcache/memcache"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/redis/go-redis/extra/redisotel/v9"
	_ "github.com/redis/go-redis/v9"
	_ "go.etcd.io/etcd/client/v3"

	_ "github.com/shardcache/shardcache/client"
	_ "github.com/shardcache/shardcache/compat/gomemcache"
	_ "github.com/shardcache/shardcache/compat/goredis"
	_ "github.com/shardcache/shardcache/promstats"
	_ "github.com/shardcache/shardcache/ring"
	_ "github.com/shardcache/shardcache/topology"
	_ "github.com/shardcache/shardcache/topology/etcdsource"
	_ "github.com/shardcache/shardcache/topology/topofile"
)
