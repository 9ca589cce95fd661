package data

import (
	"encoding/binary"
	"hash/fnv"
	"testing"
)

func TestHashIDIsFNV1aOfSlotAndValue(t *testing.T) {
	for _, slot := range []int{0, 1, 25, 70000} {
		for _, value := range []string{"", "05db9164", "a much longer categorical value"} {
			h := fnv.New64a()
			var s [4]byte
			binary.LittleEndian.PutUint32(s[:], uint32(slot))
			h.Write(s[:])
			h.Write([]byte(value))
			for _, vocab := range []int64{1, 1000, DefaultVocab} {
				if got, want := HashID(slot, []byte(value), vocab), int64(h.Sum64()%uint64(vocab)); got != want {
					t.Errorf("HashID(%d, %q, %d) = %d, want %d", slot, value, vocab, got, want)
				}
			}
		}
	}
	if HashID(0, []byte("x"), DefaultVocab) == HashID(1, []byte("x"), DefaultVocab) {
		t.Error("the same value in two slots got one id")
	}
}
