-- Full-text search over failures, test names and session entries (runstore.services.search).
--
-- Three contentless FTS5 indexes with the `ascii` tokenizer (the rule the in-memory and the
-- PostgreSQL layers reproduce exactly): the text itself stays in its own table, an index row
-- has the rowid of the row it indexes, and `contentless_delete=1` lets a trigger delete it.
-- Triggers keep each index in step with its rows inside the writing statement's transaction
-- (a cascade from a deleted run or session fires them too); the rows already stored are
-- indexed below. U+FDD0 is a separator (PostgreSQL's layer escapes NUL with it). The text is
-- never cut with substr(), which stops at a NUL, as length() does.

-- Failures: the errors of final results (attempt 0), chain heads (depth 0), not of subtests,
-- as "<exception type>: <message>". Readers keep those of failing items and collectors.
CREATE VIRTUAL TABLE search_failures USING fts5(
    body, content='', contentless_delete=1, tokenize='ascii'
);

CREATE TRIGGER search_failures_insert AFTER INSERT ON test_errors
WHEN NEW.attempt = 0 AND NEW.depth = 0 AND NEW.subtest IS NULL
BEGIN
    INSERT INTO search_failures (rowid, body) VALUES (NEW.id, replace(
        NEW.exception_type || ': ' || NEW.message, char(64976), ' '));
END;

CREATE TRIGGER search_failures_delete AFTER DELETE ON test_errors
WHEN OLD.attempt = 0 AND OLD.depth = 0 AND OLD.subtest IS NULL
BEGIN
    DELETE FROM search_failures WHERE rowid = OLD.id;
END;

INSERT INTO search_failures (rowid, body)
SELECT id, replace(exception_type || ': ' || message, char(64976), ' ')
FROM test_errors WHERE attempt = 0 AND depth = 0 AND subtest IS NULL;

-- Test names: the node id of each test of a project.
CREATE VIRTUAL TABLE search_tests USING fts5(
    body, content='', contentless_delete=1, tokenize='ascii'
);

CREATE TRIGGER search_tests_insert AFTER INSERT ON tests
BEGIN
    INSERT INTO search_tests (rowid, body)
    VALUES (NEW.id, replace(NEW.nodeid, char(64976), ' '));
END;

CREATE TRIGGER search_tests_delete AFTER DELETE ON tests
BEGIN
    DELETE FROM search_tests WHERE rowid = OLD.id;
END;

INSERT INTO search_tests (rowid, body)
SELECT id, replace(nodeid, char(64976), ' ') FROM tests;

-- Session entries: the string members named command, content, errorMessage, label, newText,
-- oldText, path, summary, text or thinking anywhere in the body, in document order, joined
-- by spaces. session_bodies has no INTEGER PRIMARY KEY (its rowid may change on VACUUM), so
-- an index row's rowid is session_key * 2^32 + seq.
CREATE VIRTUAL TABLE search_entries USING fts5(
    body, content='', contentless_delete=1, tokenize='ascii'
);

CREATE TRIGGER search_entries_insert AFTER INSERT ON session_bodies
BEGIN
    INSERT INTO search_entries (rowid, body)
    SELECT NEW.session_key * 4294967296 + NEW.seq,
           replace(coalesce(group_concat(value, ' '), ''), char(64976), ' ')
    FROM json_tree(NEW.body)
    WHERE type = 'text' AND key IN ('command', 'content', 'errorMessage', 'label', 'newText',
                                     'oldText', 'path', 'summary', 'text', 'thinking');
END;

CREATE TRIGGER search_entries_delete AFTER DELETE ON session_bodies
BEGIN
    DELETE FROM search_entries WHERE rowid = OLD.session_key * 4294967296 + OLD.seq;
END;

INSERT INTO search_entries (rowid, body)
SELECT b.session_key * 4294967296 + b.seq,
       replace(coalesce((
           SELECT group_concat(t.value, ' ') FROM json_tree(b.body) AS t
           WHERE t.type = 'text' AND t.key IN ('command', 'content', 'errorMessage', 'label',
                 'newText', 'oldText', 'path', 'summary', 'text', 'thinking')), ''),
           char(64976), ' ')
FROM session_bodies AS b;
