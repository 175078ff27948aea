-- Findings and reports are documents, read whole: the JSON in body is
-- what the API serves, decoded once per read. What queries select them
-- by is in typed columns, and these two were not: findings by the objects
-- they hurt (the object history page, ListFilter.Objects) and reports by
-- the clusters they cover (a reader scoped to some clusters sees the
-- reports of those only), both read out of body with JSONExtract on
-- every version of every row.
--
-- The writers now write the columns (detect.Repository.Upsert,
-- report.Save). Rows written before this migration read them from their
-- DEFAULT, the same JSONExtract over their own body: there is no data
-- to rewrite, and a part written before reads as it did. On a cluster
-- the migrator adds the same columns to the Distributed tables.
ALTER TABLE {{.DB}}findings{{.Local}} {{.OnCluster}}
    ADD COLUMN IF NOT EXISTS objects Array(Tuple(resource String, namespace String, name String))
        DEFAULT arrayMap(o -> (JSONExtractString(o, 'resource'), JSONExtractString(o, 'namespace'), JSONExtractString(o, 'name')),
                         JSONExtractArrayRaw(body, 'objects'))
        AFTER title;

ALTER TABLE {{.DB}}reports{{.Local}} {{.OnCluster}}
    ADD COLUMN IF NOT EXISTS clusters Array(LowCardinality(String))
        DEFAULT JSONExtract(body, 'clusters', 'Array(String)')
        AFTER window_end;
