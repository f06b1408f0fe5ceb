package ost

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Names inside the OST directory. Everything below chunks/ is named from
// chunk ids only, never from a client-supplied string.
const (
	chunksDir  = "chunks"   // chunks/<xx>/<extent>.<index>[.crc]
	tmpDir     = "tmp"      // temp files of writes in flight; emptied at Open
	uuidFile   = "ost.uuid" // this OST's uuid, created once
	idFile     = "ost.id"   // the id the MDS assigned, decimal
	crcSuffix  = ".crc"     // the checksum sidecar of a chunk
	fanout     = 256        // number of chunks/<xx> directories
	extentHexW = 16         // hex digits of an extent id in a name
)

// chunkID names a chunk: chunk index of extent extent.
type chunkID struct {
	extent uint64
	index  uint32
}

func (c chunkID) String() string { return fmt.Sprintf("%016x.%d", c.extent, c.index) }

// shardName is the chunks/ subdirectory of an extent: the low byte of its id.
func shardName(extent uint64) string { return fmt.Sprintf("%02x", byte(extent)) }

// relDataPath is the data file of c relative to the OST directory.
func relDataPath(c chunkID) string {
	return filepath.Join(chunksDir, shardName(c.extent), c.String())
}

// parseChunkName parses the base name of a file under chunks/<xx>/: a data
// file "<16 hex>.<index>" or a sidecar "<16 hex>.<index>.crc". It accepts
// only names that relDataPath produces (canonical spelling), so a stray file
// is never taken for a chunk.
func parseChunkName(name string) (c chunkID, sidecar, ok bool) {
	if s, found := strings.CutSuffix(name, crcSuffix); found {
		name, sidecar = s, true
	}
	ext, idx, found := strings.Cut(name, ".")
	if !found || len(ext) != extentHexW {
		return chunkID{}, false, false
	}
	e, err := strconv.ParseUint(ext, 16, 64)
	if err != nil {
		return chunkID{}, false, false
	}
	i, err := strconv.ParseUint(idx, 10, 32)
	if err != nil {
		return chunkID{}, false, false
	}
	c = chunkID{extent: e, index: uint32(i)}
	if c.String() != name {
		return chunkID{}, false, false
	}
	return c, sidecar, true
}
