//go:build !race

package client

// raceEnabled: see race_test.go.
const raceEnabled = false
