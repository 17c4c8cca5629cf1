package ring

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadHashTag is returned for a hash tag option that is not two characters.
var ErrBadHashTag = errors.New("shardcache/ring: bad hash tag")

// A hashTag is twemproxy's hash_tag: two bytes, open and close. A key that
// holds open and a later close with at least one byte between the first open
// and the first close after it is hashed by those bytes alone; any other key
// whole. The zero hashTag hashes every key whole. HashTag is this rule with
// "{}".
type hashTag struct {
	open, close byte
	set         bool
}

// parseHashTag checks a hash tag option: "" for none, else exactly two
// bytes, as twemproxy's configuration requires.
func parseHashTag(tag string) (hashTag, error) {
	switch len(tag) {
	case 0:
		return hashTag{}, nil
	case 2:
		return hashTag{open: tag[0], close: tag[1], set: true}, nil
	}
	return hashTag{}, fmt.Errorf("%w: %q (want two characters, such as \"{}\", or none)", ErrBadHashTag, tag)
}

// of returns the part of key that is hashed.
func (t hashTag) of(key string) string {
	if !t.set {
		return key
	}
	if i := strings.IndexByte(key, t.open); i >= 0 {
		if j := strings.IndexByte(key[i+1:], t.close); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// String returns the tag as configured: its two bytes, or "".
func (t hashTag) String() string {
	if !t.set {
		return ""
	}
	return string([]byte{t.open, t.close})
}
