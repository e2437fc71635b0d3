-- Identity of a runstore database: when it was created and by which schema line.
CREATE TABLE runstore_meta (
    key   TEXT COLLATE "C" PRIMARY KEY,
    value TEXT COLLATE "C" NOT NULL
);

INSERT INTO runstore_meta (key, value)
VALUES ('database_id', replace(gen_random_uuid()::text, '-', '')),
       ('created_at_ms', floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint::text);
