-- Identity of a runstore database: when it was created and by which schema line.
CREATE TABLE runstore_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT, WITHOUT ROWID;

INSERT INTO runstore_meta (key, value)
VALUES ('database_id', lower(hex(randomblob(16)))),
       ('created_at_ms', CAST(CAST(unixepoch('subsec') * 1000 AS INTEGER) AS TEXT));
