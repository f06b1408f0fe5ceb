package main

import "fmt"

// judgeSpace adds the findings about each OST's space and about narrow
// extents (docs/reliability.md, "Writes while OSTs are down or full"):
// an OST in service that is full (the MDS places no new chunk there) is
// an error, one near full a warning, and extents written narrow (fewer
// than k+m chunks, while OSTs were down or full) a warning until the MDS
// has widened them.
func (rep *statusReport) judgeSpace() {
	for _, o := range rep.OSTs.List {
		if o.State != "up" && o.State != "draining" {
			continue
		}
		pct := 0.0
		if o.Capacity > 0 {
			pct = float64(o.Capacity-min(o.Free, o.Capacity)) / float64(o.Capacity) * 100
		}
		switch {
		case o.Full:
			rep.err = append(rep.err, fmt.Sprintf("OST %d (%s) is full (%.0f%% used, %s free): no new chunks go there; writes go to the other OSTs, narrow when fewer than k+m can take them", o.ID, o.Addr, pct, humanBytes(o.Free)))
		case o.Nearfull:
			rep.warn = append(rep.warn, fmt.Sprintf("OST %d (%s) is near full (%.0f%% used, %s free)", o.ID, o.Addr, pct, humanBytes(o.Free)))
		}
	}
	if rep.NarrowExtents > 0 {
		rep.warn = append(rep.warn, fmt.Sprintf("%d extents were written with fewer than k+m chunks (OSTs down or full): the MDS rebuilds their missing chunks when OSTs can take them", rep.NarrowExtents))
	}
}
