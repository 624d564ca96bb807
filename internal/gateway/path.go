package gateway

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// ParsePath splits an escaped request path, as the client sent it
// ("/bucket/key..."), into its bucket and key, decoded once. A path is
// refused unless it names exactly one object whatever the store does with
// it: a "." or ".." segment, an empty segment ("a//b", a trailing "/"), an
// encoded "/" or "." (%2F, %2E, any case), an invalid escape, or a key that
// is not UTF-8 or holds a control character. What is accepted reaches the
// store as EscapePath(bucket, key), and any two accepted paths that decode
// to one key are the same object, the same route and the same lock.
//
// A path of the bucket alone ("/bucket" or "/bucket/") has an empty key;
// "/" has an empty bucket.
func ParsePath(escaped string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(escaped, "/")
	if !ok {
		return "", "", fmt.Errorf("it does not start with /")
	}
	if rest == "" {
		return "", "", nil
	}
	if i := encodedSeparator(rest); i >= 0 {
		return "", "", fmt.Errorf("it encodes a %q as %s: send / and . unencoded", decodedSeparator(rest[i:i+3]), rest[i:i+3])
	}
	rawBucket, rawKey, hasKey := strings.Cut(rest, "/")
	if bucket, err = segment(rawBucket); err != nil {
		return "", "", fmt.Errorf("bucket %q: %w", rawBucket, err)
	}
	if !hasKey || rawKey == "" {
		return bucket, "", nil
	}
	parts := strings.Split(rawKey, "/")
	for i, p := range parts {
		if parts[i], err = segment(p); err != nil {
			return "", "", err
		}
	}
	return bucket, strings.Join(parts, "/"), nil
}

// segment decodes one path segment and refuses what does not name itself.
func segment(raw string) (string, error) {
	s, err := url.PathUnescape(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("invalid escape in %q", raw)
	case s == "":
		return "", fmt.Errorf("it has an empty segment (// or a trailing /)")
	case s == "." || s == "..":
		return "", fmt.Errorf("it has a %q segment", s)
	case !utf8.ValidString(s):
		return "", fmt.Errorf("segment %q is not UTF-8", raw)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("segment %q holds a control character", raw)
		}
	}
	return s, nil
}

// CheckPrefix refuses a listing prefix with a "." or ".." segment or an
// empty segment other than a trailing one, for the same reason as
// ParsePath: a store that resolved it would list keys of another route.
func CheckPrefix(prefix string) error {
	parts := strings.Split(prefix, "/")
	for i, p := range parts {
		switch {
		case p == "." || p == "..":
			return fmt.Errorf("it has a %q segment", p)
		case p == "" && i > 0 && i < len(parts)-1, p == "" && i == 0 && len(parts) > 1:
			return fmt.Errorf("it has an empty segment (//)")
		}
	}
	return nil
}

// encodedSeparator returns the index of the first %2F or %2E (any case) in
// s, or -1.
func encodedSeparator(s string) int {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && s[i+1] == '2' && strings.ContainsRune("fFeE", rune(s[i+2])) {
			return i
		}
	}
	return -1
}

func decodedSeparator(escape string) string {
	if strings.EqualFold(escape, "%2F") {
		return "/"
	}
	return "."
}

// EscapePath is the path of an object as the gateway sends it to the store:
// each segment of the bucket and the key escaped as S3's signature
// canonicalises it (every byte but A-Z a-z 0-9 - _ . ~), so that the store
// decodes exactly the key that was routed, locked and checked.
func EscapePath(bucket, key string) string {
	var b strings.Builder
	b.WriteByte('/')
	escapeInto(&b, bucket)
	if key != "" {
		b.WriteByte('/')
		for i, p := range strings.Split(key, "/") {
			if i > 0 {
				b.WriteByte('/')
			}
			escapeInto(&b, p)
		}
	}
	return b.String()
}

func escapeInto(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
}
