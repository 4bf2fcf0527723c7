-- Shared by every regression file: the extension, and error_of() which runs a
-- statement and returns 'ok' or its SQLSTATE and message, so expected files
-- pin the SQLSTATE of every error a user can hit.
-- This server runs without shared_preload_libraries (test/regress.conf), so
-- no publisher touches the events these files write, and CREATE EXTENSION
-- gives the WARNING a user sees in that setup.
CREATE EXTENSION outbox;
SELECT outbox.publisher_preloaded();

CREATE FUNCTION public.error_of(statement text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
