package api

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// IdempotencyKeyHeader names the header with which a client marks every
// try of one job submission (POST /v1/jobs) alike, so that a coordinator
// can answer a retry with the job the first try created instead of
// starting the job twice.
const IdempotencyKeyHeader = "Idempotency-Key"

// Bounds of an idempotency key's length, in characters.
const (
	MinIdempotencyKey = 16
	MaxIdempotencyKey = 128
)

// CheckIdempotencyKey checks that k is 16..128 characters of
// [A-Za-z0-9_-].
func CheckIdempotencyKey(k string) error {
	if len(k) < MinIdempotencyKey || len(k) > MaxIdempotencyKey {
		return fmt.Errorf("%s: %d characters, want %d..%d", IdempotencyKeyHeader, len(k), MinIdempotencyKey, MaxIdempotencyKey)
	}
	for i := range len(k) {
		if c := k[i]; !isKeyChar(c) {
			return fmt.Errorf("%s: character %d is %q, want only A-Z, a-z, 0-9, _ and -", IdempotencyKeyHeader, i+1, c)
		}
	}
	return nil
}

func isKeyChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// NewIdempotencyKey returns a random 128-bit key in hex.
func NewIdempotencyKey() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand aborts the program instead)
	return hex.EncodeToString(b[:])
}
