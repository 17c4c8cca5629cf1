// Package integration holds the client's tests that need modules the core
// module does not require: network faults through toxiproxy
// (internal/testserver/faultproxy) and tracing through OpenTelemetry
// (redisotel). It is a module of its own, test files only, so that a
// program importing client does not have toxiproxy, zerolog or the
// OpenTelemetry SDK in its module graph; its tests reach the client through
// its exported API. Run them with `go test` in this directory (make test
// runs every module).
package integration
