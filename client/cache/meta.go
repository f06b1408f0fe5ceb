package cache

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"

	"github.com/shoalfs/shoal/internal/errs"
)

// The meta file of an entry, "<ino>.meta", little endian:
//
//	magic "SHCM", format u32 (1), ino u64, gen u64, version [32]byte,
//	size i64, block size i64, last use (unix ns) i64, blocks u32,
//	then per block: present u8, CRC32C u32,
//	then the CRC32C of everything before it, u32.
//
// It is written to a temporary file and renamed, without fsync: after a
// crash a meta may name blocks whose data never reached the disk, and
// their checksums catch that.
const (
	metaMagic  = "SHCM"
	metaFormat = 1
	metaHeader = 4 + 4 + 8 + 8 + 32 + 8 + 8 + 8 + 4
)

// encodeMeta returns the meta of e. Needs e.mu.
func encodeMetaLocked(e *entry) []byte {
	b := make([]byte, 0, metaHeader+5*len(e.present)+4)
	b = append(b, metaMagic...)
	b = binary.LittleEndian.AppendUint32(b, metaFormat)
	b = binary.LittleEndian.AppendUint64(b, e.ino)
	b = binary.LittleEndian.AppendUint64(b, e.gen)
	b = append(b, e.version[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(e.size))
	b = binary.LittleEndian.AppendUint64(b, uint64(e.bs))
	b = binary.LittleEndian.AppendUint64(b, uint64(e.used))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(e.present)))
	for i, p := range e.present {
		if p {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.LittleEndian.AppendUint32(b, e.crc[i])
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeMeta parses a meta; bs is the cache's block size, which the entry
// must have been written with.
func decodeMeta(b []byte, bs int64) (*entry, error) {
	bad := func(why string) error { return fmt.Errorf("cache meta: %s: %w", why, errs.ErrCorrupt) }
	if len(b) < metaHeader+4 || string(b[:4]) != metaMagic {
		return nil, bad("no magic")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, bad("checksum mismatch")
	}
	le := binary.LittleEndian
	if le.Uint32(b[4:]) != metaFormat {
		return nil, bad("unknown format")
	}
	var v Version
	copy(v[:], b[24:56])
	size, ebs := int64(le.Uint64(b[56:])), int64(le.Uint64(b[64:]))
	if ebs != bs || size < 0 {
		return nil, bad("other block size")
	}
	e := newEntry(le.Uint64(b[8:]), le.Uint64(b[16:]), v, size, bs)
	e.used = int64(le.Uint64(b[72:]))
	n := int(le.Uint32(b[80:]))
	if n != len(e.present) || len(body) != metaHeader+5*n {
		return nil, bad("block count")
	}
	for i := range n {
		p := body[metaHeader+5*i:]
		e.present[i] = p[0] == 1
		e.crc[i] = le.Uint32(p[1:])
	}
	return e, nil
}

func readMeta(path string, bs int64) (*entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeMeta(b, bs)
}

// writeMeta writes e's meta when it changed since it was last written.
func (c *Cache) writeMeta(e *entry) error {
	c.mu.Lock()
	dropped := e.dropped
	c.mu.Unlock()
	e.mu.Lock()
	if !e.dirty || dropped {
		e.mu.Unlock()
		return nil
	}
	b := encodeMetaLocked(e)
	e.dirty = false
	e.usedSaved = e.used
	e.mu.Unlock()
	tmp := c.metaPath(e.ino) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.metaPath(e.ino)); err != nil {
		return err
	}
	// Dropped meanwhile: do not leave its meta behind.
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.dropped {
		if cur := c.mu.entries[e.ino]; cur != nil {
			cur.mu.Lock()
			cur.dirty = true // rewrite the meta this one replaced
			cur.mu.Unlock()
		} else {
			os.Remove(c.metaPath(e.ino))
		}
	}
	return nil
}
