package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// runMigrate brings the collection to this build's schema version and
// creates its indexes, as a worker's start-up would. It is the step to run
// before workers that may not write indexes (worker.Config.SkipIndexes), or
// to see what a start-up would do.
func runMigrate(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	create := fs.Bool("create", false, "create the collection if it does not exist (without it, a mistyped name is an error)")
	adopt := fs.Bool("adopt", false, "mark the collection as a task collection first, though it holds documents and no mark (its metadata lost): from then on workers set invalid, with the reason, every document that is no task")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("migrate", args); err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	if !*create {
		if err := c.mustExist(ctx); err != nil {
			return err
		}
	} else if err := c.creatable(); err != nil {
		return err
	}
	coll := c.client.Database(c.db).Collection(c.collection)
	before, err := storedSchema(ctx, coll)
	if err != nil {
		return err
	}
	adopted := ""
	if *adopt && before != mscheduler.SchemaVersion {
		if err := mscheduler.Adopt(ctx, coll); err != nil {
			return libraryError("migrate", err)
		}
		adopted = "adopted as a task collection; "
	}
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		return libraryError("migrate", err)
	}
	if _, err := fmt.Fprint(c.stdout, coll.Name()+": "+adopted); err != nil {
		return err
	}
	switch before {
	case mscheduler.SchemaVersion:
		_, err = fmt.Fprintf(c.stdout, "at schema version %d; indexes ensured\n", before)
	case 0:
		_, err = fmt.Fprintf(c.stdout, "new collection, stamped schema version %d; indexes created\n", mscheduler.SchemaVersion)
	default:
		_, err = fmt.Fprintf(c.stdout, "migrated from schema version %d to %d; indexes ensured\n", before, mscheduler.SchemaVersion)
	}
	return err
}

// storedSchema is the collection's schema version as its metadata records
// it (see the README, "Schema versions"): none means the first layout, or
// 0 for a collection with no tasks at all.
func storedSchema(ctx context.Context, coll *mongo.Collection) (int, error) {
	var meta struct {
		Version int `bson:"version"`
	}
	err := coll.Database().Collection(coll.Name()+".meta").FindOne(ctx, bson.D{{Key: "_id", Value: "schema"}}).Decode(&meta)
	if err == nil {
		return meta.Version, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, fmt.Errorf("read the schema version of %s: %w", coll.Name(), err)
	}
	err = coll.FindOne(ctx, bson.D{}).Err()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	return mscheduler.SchemaVersionOldest, nil
}
