// Types of ermis-realtime.js for a TypeScript front end. The event payload types come from
// ermis-realtime-events.d.ts, generated from the same schemas the server's models write
// (contracts/schemas/events); this file names the client's functions, options and statuses, and a
// test checks it declares exactly what the module exports and that it compiles with tsc --strict.
import type { FeedChanged, StoryPhase, StreamEventName, StreamEvents } from './ermis-realtime-events';

export type { StreamEventName, StreamEvents } from './ermis-realtime-events';
export type * from './ermis-realtime-events';

/** What a connection is doing: 'polling' whenever the stream is not open, never a stale 'streaming'. */
export type ConnectionStatus = 'connecting' | 'streaming' | 'polling' | 'offline';

export type NotificationEventName = 'alert.triggered' | 'review.status.changed' | 'delivery.failed' | 'notification.created';

/** A frame that did not match its event's schema: dropped, reported once per event name. */
export type InvalidFrameHandler = (name: StreamEventName, data: unknown) => void;

/** The EventSource the client opens (the browser's, or one that shares a stream across tabs). */
export interface EventSourceLike {
  onopen: ((event: Event) => void) | null;
  onerror: ((event: Event) => void) | null;
  readonly readyState: number;
  addEventListener(name: string, listener: (event: MessageEvent) => void): void;
  close(): void;
}
export type EventSourceConstructor = new (url: string, init?: EventSourceInit) => EventSourceLike;

export interface StreamHandle {
  readonly status: ConnectionStatus | null;
  close(): void;
}

export interface NotificationStreamOptions {
  url?: string;
  events?: readonly NotificationEventName[];
  restPolling?: boolean;
  enabled?: boolean;
  pollIntervalMs?: number;
  skipInitialReplay?: boolean;
  onEvent?: <K extends NotificationEventName>(name: K, payload: StreamEvents[K]) => void;
  onRefresh?: () => void;
  onStatus?: (status: ConnectionStatus) => void;
  onInvalid?: InvalidFrameHandler;
  EventSourceImpl?: EventSourceConstructor;
}

export interface FeedStreamOptions {
  url?: string;
  fallbackUrl?: string;
  pollIntervalMs?: number;
  onChange?: (kind: 'UPDATE', watermark: FeedChanged) => void;
  onStatus?: (status: ConnectionStatus) => void;
  onInvalid?: InvalidFrameHandler;
  EventSourceImpl?: EventSourceConstructor;
}

export interface StoryStreamOptions {
  fallbackPollMs?: number;
  onPhase?: (phase: StoryPhase) => void;
  onStatus?: (status: ConnectionStatus) => void;
  onInvalid?: InvalidFrameHandler;
  EventSourceImpl?: EventSourceConstructor;
}

export interface FeatureFlags {
  rssQueuePipeline: boolean;
  notificationsRestPolling: boolean;
  instantAlerts: boolean;
  alertWebhooks: boolean;
  aiUsageMetering: boolean;
}

export declare const NOTIFICATION_EVENTS: NotificationEventName[];
export declare const DEFAULT_FEATURE_FLAGS: Readonly<FeatureFlags>;
export declare function connectNotificationStream(options?: NotificationStreamOptions): StreamHandle;
export declare function connectFeedStream(options?: FeedStreamOptions): StreamHandle;
export declare function connectStoryStream(storyId: string, options?: StoryStreamOptions): StreamHandle;
export declare function loadTenantFeatureFlags(url?: string): Promise<FeatureFlags & Record<string, boolean>>;
export declare function resumingEventSourceClass(
  EventSourceImpl?: EventSourceConstructor,
  fetchImpl?: typeof fetch,
): EventSourceConstructor;
/** The signed-in user the tabs share streams under: the `__session` cookie's `sub`, or null. */
export declare function sessionKeyFromCookie(): string | null;
export declare function sharedEventSourceClass(
  EventSourceImpl?: EventSourceConstructor,
  sessionKey?: () => string | null,
): EventSourceConstructor;
export declare function broadcastElection(name: string, onLead: () => void, onDemote: () => void): { close(): void };
