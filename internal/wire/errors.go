package wire

import (
	"errors"
	"fmt"
	"io"
)

// ErrNoCRLF is a value not followed by CR LF: the stream is out of step.
var ErrNoCRLF = errors.New("shardcache/wire: value not followed by CR LF")

// ErrProtocol marks an answer the client cannot read: the stream is out of
// step and the connection is closed.
var ErrProtocol = errors.New("shardcache/wire: protocol error")

func errBadSize(size int) error {
	return fmt.Errorf("%w: a value of %d bytes (at most %d)", ErrProtocol, size, MaxValue)
}

func ioReadFull(r io.Reader, b []byte) (int, error) { return io.ReadFull(r, b) }
