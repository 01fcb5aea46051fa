// Package runend writes the ends of runs: each the owner's transition
// (taskstate.End) sent fenced on its run, read again and rebuilt when the
// task moved between cases, told apart from a takeover when it misses;
// and, when run ends are ready together, several in one command
// (Batcher), with the history marks of earlier runs riding along.
package runend
