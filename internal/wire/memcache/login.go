package memcache

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// loginKey is the key of the login's set: a server without authentication
// stores it instead, with an expiry in the past, so nothing stays behind.
const loginKey = "shardcache:login"

// Login returns memcached's ASCII authentication (memcached -Y) for a
// wire.Dialer: on each new connection, a set of any key whose value is
// "user password", answered STORED when accepted. A refusal is ErrAuth,
// its message without the password.
func Login(user, password string) func(ctx context.Context, conn net.Conn) error {
	token := user + " " + password
	msg := "set " + loginKey + " 0 -1 " + strconv.Itoa(len(token)) + "\r\n" + token + "\r\n"
	return func(ctx context.Context, conn net.Conn) error {
		if dl, ok := ctx.Deadline(); ok {
			conn.SetDeadline(dl)
			defer conn.SetDeadline(time.Time{})
		}
		if _, err := conn.Write([]byte(msg)); err != nil {
			return err
		}
		// One line, read a byte at a time so that nothing after it is
		// consumed (the pool's reader starts after it).
		var line []byte
		b := make([]byte, 1)
		for len(line) < 256 {
			if _, err := conn.Read(b); err != nil {
				return fmt.Errorf("memcached login: %w", err)
			}
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
		}
		if reply := string(line); reply != "STORED\r" {
			if password != "" { // quoted without the password, should a server echo it
				reply = strings.ReplaceAll(reply, password, "[redacted]")
			}
			return fmt.Errorf("%w: memcached refused user %q: %q", ErrAuth, user, strings.TrimSuffix(reply, "\r"))
		}
		return nil
	}
}
