-- Why a delivery failed, in words (no endpoint, no answer, no email sender configured), next to
-- the response code the contract already has.
ALTER TABLE delivery_logs ADD COLUMN detail text;
