-- What a client a rule rejects is told (policy.Rule.Message).
ALTER TABLE rules ADD COLUMN message text NOT NULL DEFAULT ''
    CONSTRAINT rules_message_check CHECK (octet_length(message) <= 512);
