-- Full-text search over failures, test names and session entries (runstore.services.search).
--
-- SQLite's 0012 keeps FTS5 indexes with the `ascii` tokenizer; here each document's distinct
-- tokens are a `text[]` made by search_tokens() below, which reproduces that tokenizer
-- exactly (not PostgreSQL's text parser, whose words depend on the server's locale): runs of
-- ASCII letters and digits and characters beyond ASCII, ASCII letters folded to lower case,
-- U+FDD0 a separator, each token cut to 255 characters (the longest term a query holds; a GIN
-- entry holds about 2.7 kB), with a GIN index. An array, not a `tsvector`, which holds at
-- most 1 MB: a long tool output in a session would not fit. Statement triggers keep the indexes in
-- step with their rows in the writing transaction; foreign keys cascade their deletes; the
-- rows already stored are indexed below.
--
-- Text at rest here has NUL escaped as U+FDD0 '0' and U+FDD0 as U+FDD0 U+FDD0 (the layer's
-- escape); search_plain() turns each such pair into one space, a separator as NUL and U+FDD0
-- are, so the text keeps its length.

CREATE FUNCTION search_plain(stored text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT regexp_replace(stored, U&'\FDD0.', ' ', 'g') $$;

CREATE FUNCTION search_tokens(doc text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT coalesce(array_agg(DISTINCT left(t, 255)), '{}')
    FROM regexp_split_to_table(
        translate(replace(doc, U&'\FDD0', ' '),
                  'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'),
        '[^0-9a-z\u0080-\uffff\U00010000-\U0010ffff]+') AS t
    WHERE t <> ''
$$;

-- The text of an entry body: the string members named command, content, errorMessage,
-- label, newText, oldText, path, summary, text or thinking anywhere in it, in document order
-- (read as `json`, which keeps the order, with each JSON escape of NUL made a space, since
-- PostgreSQL text cannot hold NUL), joined by spaces.
CREATE FUNCTION search_entry_text(stored text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    WITH RECURSIVE walk (path, key, value) AS (
        SELECT ARRAY[]::int[], NULL::text,
               regexp_replace(replace(stored, U&'\FDD0\FDD0', U&'\FDD0'),
                              '(?<!\\)((?:\\\\)*)\\u0000', '\1 ', 'g')::json
        UNION ALL
        SELECT w.path || c.n, c.key, c.value
        FROM walk AS w CROSS JOIN LATERAL (
            SELECT e.key, e.value, e.n::int AS n
            FROM json_each(CASE WHEN json_typeof(w.value) = 'object' THEN w.value END)
                 WITH ORDINALITY AS e (key, value, n)
            UNION ALL
            SELECT NULL, a.value, a.n::int
            FROM json_array_elements(CASE WHEN json_typeof(w.value) = 'array' THEN w.value END)
                 WITH ORDINALITY AS a (value, n)
        ) AS c
    )
    SELECT coalesce(string_agg(value #>> '{}', ' ' ORDER BY path), '')
    FROM walk
    WHERE json_typeof(value) = 'string'
      AND key IN ('command', 'content', 'errorMessage', 'label', 'newText', 'oldText', 'path',
                  'summary', 'text', 'thinking')
$$;

-- Failures: the errors of final results (attempt 0), chain heads (depth 0), not of subtests.
CREATE TABLE search_failures (
    error_id BIGINT PRIMARY KEY REFERENCES test_errors (id) ON DELETE CASCADE,
    tokens   text[] NOT NULL
);

CREATE INDEX search_failures_tokens ON search_failures USING gin (tokens);

CREATE FUNCTION search_failures_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_failures (error_id, tokens)
    SELECT id, search_tokens(search_plain(exception_type || ': ' || message)) FROM inserted
    WHERE attempt = 0 AND depth = 0 AND subtest IS NULL;
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_failures_insert AFTER INSERT ON test_errors
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION search_failures_insert();

INSERT INTO search_failures (error_id, tokens)
SELECT id, search_tokens(search_plain(exception_type || ': ' || message)) FROM test_errors
WHERE attempt = 0 AND depth = 0 AND subtest IS NULL;

-- Test names: the node id of each test of a project.
CREATE TABLE search_tests (
    test_id BIGINT PRIMARY KEY REFERENCES tests (id) ON DELETE CASCADE,
    tokens  text[] NOT NULL
);

CREATE INDEX search_tests_tokens ON search_tests USING gin (tokens);

CREATE FUNCTION search_tests_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_tests (test_id, tokens)
    SELECT id, search_tokens(search_plain(nodeid)) FROM inserted;
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_tests_insert AFTER INSERT ON tests
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION search_tests_insert();

INSERT INTO search_tests (test_id, tokens)
SELECT id, search_tokens(search_plain(nodeid)) FROM tests;

-- Session entries, keyed as their bodies are.
CREATE TABLE search_entries (
    session_key BIGINT NOT NULL,
    seq         BIGINT NOT NULL,
    tokens      text[] NOT NULL,
    PRIMARY KEY (session_key, seq),
    FOREIGN KEY (session_key, seq) REFERENCES session_bodies (session_key, seq)
        ON DELETE CASCADE
);

CREATE INDEX search_entries_tokens ON search_entries USING gin (tokens);

CREATE FUNCTION search_entries_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_entries (session_key, seq, tokens)
    SELECT session_key, seq, search_tokens(search_entry_text(body)) FROM inserted;
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_entries_insert AFTER INSERT ON session_bodies
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION search_entries_insert();

INSERT INTO search_entries (session_key, seq, tokens)
SELECT session_key, seq, search_tokens(search_entry_text(body)) FROM session_bodies;
