// Package memcache runs gomemcache's own tests against compat/gomemcache.
//
// memcache_test.go, fakeserver_test.go, fakecerts_test.go, selector_test.go
// and LICENSE are github.com/bradfitz/gomemcache's files, at the version
// go.mod requires, byte for byte: the package is named memcache, as
// theirs is, so that not even their package clause changes.
// TestUpstreamCopy compares them with the module cache, and
// `go generate` (or go test -run TestUpstreamCopy -update) copies them
// again after gomemcache's version changes.
//
// What they call of gomemcache's package is supplied by shim_test.go: New
// and Client are the drop-in (a *gomemcache.Client over the servers
// named), Item and the errors gomemcache's own. upstream_test.go runs the
// suite's body, testWithClient, against three memcached servers, three of
// gomemcache's fake servers, three over TLS, and through a Reshard at
// points of the suite; its excluded lists the upstream tests that do not
// run, each with why.
package memcache

//go:generate go test -run ^TestUpstreamCopy$ -update
