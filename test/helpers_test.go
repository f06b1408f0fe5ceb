package test

import "github.com/shoalfs/shoal/mds/mdspb"

func mdsGetExtents(ino uint64) *mdspb.GetExtentsRequest { return &mdspb.GetExtentsRequest{Ino: ino} }
