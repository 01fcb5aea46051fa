package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// runParamsSchema shows, sets or removes the JSON Schema that the params
// of every task published into the collection must satisfy.
func runParamsSchema(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	set := fs.String("set", "", "set the schema from this JSON `file` (- for stdin)")
	remove := fs.Bool("remove", false, "remove the schema: params are no longer checked")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("params-schema", args); err != nil {
		return err
	}
	if *set != "" && *remove {
		return usageErrorf("params-schema: give --set or --remove, not both")
	}
	var schema []byte
	if *set != "" {
		if schema, err = readSchemaFile(*set); err != nil {
			return usageErrorf("params-schema: --set: %v", err)
		}
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	coll := c.client.Database(c.db).Collection(c.collection)
	switch {
	case *set != "":
		var invalid *mscheduler.InvalidError
		if err := mscheduler.SetParamsSchema(ctx, coll, schema); errors.As(err, &invalid) {
			return usageErrorf("params-schema: --set %s: %s", *set, invalid.Reason)
		} else if err != nil {
			return libraryError("params-schema", err)
		}
		_, err = fmt.Fprintf(c.stdout, "%s: params are checked against the schema of %s from now on (running producers within a minute)\n", c.collection, *set)
	case *remove:
		if err := mscheduler.SetParamsSchema(ctx, coll, nil); err != nil {
			return libraryError("params-schema", err)
		}
		_, err = fmt.Fprintf(c.stdout, "%s: params are no longer checked\n", c.collection)
	default:
		schema, err := mscheduler.ParamsSchema(ctx, coll)
		if err != nil {
			return libraryError("params-schema", err)
		}
		if schema == nil {
			_, err = fmt.Fprintf(c.stdout, "%s has no params schema: any params are accepted\n", c.collection)
			return err
		}
		_, err = fmt.Fprintf(c.stdout, "%s\n", schema)
	}
	return err
}

// readSchemaFile reads a schema from a file, or stdin for "-".
func readSchemaFile(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(name)
}
