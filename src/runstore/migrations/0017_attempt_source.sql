-- Where each earlier attempt of an item came from, and how many earlier attempts passed.
-- source: 'rerun' when another plugin ran the item again (pytest-rerunfailures reruns a
-- failing item), 'repeat' when runstore ran it again itself (--runstore-repeat, early flake
-- detection). Rows written before this migration are reruns: runstore did not repeat then.
ALTER TABLE test_attempts ADD COLUMN source TEXT NOT NULL DEFAULT 'rerun';
-- earlier_passes: passing (passed or xpassed) attempts before the final one in that run,
-- beside rerun_failures; the evidence of the flipped_in_run rule, kept beyond pruning. A
-- rerun plugin reruns failing attempts only, so every row written before this migration
-- had none: 0.
ALTER TABLE test_history ADD COLUMN earlier_passes INTEGER NOT NULL DEFAULT 0
    CHECK (earlier_passes >= 0);
